"""relight-verl: train relight agents on GPUs with verl (FSDP actor and critic, vLLM replicas, Ray).

Importing it is cheap: verl, torch and Ray load when a batch is built or training starts. The
pieces that need them live in submodules: :mod:`relight_verl.batch` (transitions → verl batch),
:mod:`relight_verl.advantages` (verl's estimators), :mod:`relight_verl.metrics`.
"""

from relight_verl.algorithm import VerlAlgorithm
from relight_verl.config import Estimator, VerlConfig, to_verl_config

__all__ = ["Estimator", "VerlAlgorithm", "VerlConfig", "to_verl_config"]
