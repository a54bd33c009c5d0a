"""WebShop (Yao et al., 2022) re-implemented in pure Python, faithful to the original text environment.

    from apo_lightning.webshop import WebShop, WebShopEnv
    shop = WebShop.load(data_dir, goals="synthetic", seed=233)
    env = WebShopEnv(shop, observation_mode="text", max_steps=15)
    obs = env.reset(goal_index)
    obs, reward, done, info = env.step("search[red running shoes]")

Files: ``catalog`` (raw files -> processed products, prices), ``goals`` (synthetic/human goals, splits),
``search`` (Lucene-compatible BM25, pruned top-k), ``store`` (a large catalog on disk: built once from the raw
files, then memory-mapped), ``pages`` (observations, clickables), ``reward``, ``shop`` (the loaded
catalog), ``env`` (one session), ``gym_env`` (gymnasium's API: ``gymnasium.make("apo_lightning/WebShop-v0")``,
registered on import), ``settings`` (a run's WebShop settings, ``EnvConfig``), ``wording`` (instructions reworded
from their goals' fields, same reward), ``synthetic`` (the
generated default catalog; its vocabulary is ``data/synthetic_vocabulary.json``), ``datadir`` (where the data is
read from), ``download`` (fetch and verify the 1k files), ``sessions`` (recorded episodes), ``site`` and ``serve``
(the env as web pages for people), ``__main__`` (play, download, serve).
"""

from .catalog import WebShopDataError
from .env import WebShopEnv, parse_action
from .gym_env import ENV_ID, WebShopGymEnv
from .shop import WebShop

__all__ = ["ENV_ID", "WebShop", "WebShopEnv", "WebShopGymEnv", "WebShopDataError", "parse_action"]
