"""relight-verl: train relight agents on GPUs with verl (FSDP actor and critic, vLLM replicas, Ray).

Import is cheap: verl, torch and Ray load only when a name that needs them is first used.
"""

from relight_verl.config import VerlConfig, to_verl_config

__all__ = ["VerlConfig", "to_verl_config"]
