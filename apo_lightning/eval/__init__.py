"""Evaluation: metrics, reports (CSV, JSONL, failure taxonomy, HTML), paired comparison and the evaluation CLI."""
