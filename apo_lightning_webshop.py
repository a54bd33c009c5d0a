"""The WebShop taskset under the top-level name ``verifiers`` resolves (``--env.taskset.id apo_lightning_webshop``):
verifiers 0.4 imports a taskset id as a top-level module (``verifiers/v1/utils/loaders.py``, ``_import_plugin``).
Everything lives in :mod:`apo_lightning.integrations.verifiers_env`; this module re-exports it."""

from apo_lightning.integrations.verifiers_env import *  # noqa: F401,F403
from apo_lightning.integrations.verifiers_env import __all__  # noqa: F401
