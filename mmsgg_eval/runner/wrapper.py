"""The evaluation-only distributed model wrapper."""
from typing import Any

from torch import nn

from ..registry import MODEL_WRAPPERS


@MODEL_WRAPPERS.register_module()
class EvalOnlyModelWrapper(nn.Module):
    """Distributed wrapper for evaluation: forwards ``val_step``/``test_step``, no gradient synchronisation.

    DDP cannot wrap a model without trainable parameters and needs a GPU per rank with ``device_ids``; for
    evaluation (any backend, CPU or GPU) nothing has to be synchronised but the metrics, which reduce
    themselves. :func:`~mmsgg_eval.runner.setup_cpu_distributed` selects it through ``model_wrapper_cfg``.
    """

    def __init__(self, module: nn.Module, **kwargs: Any) -> None:
        super().__init__()
        self.module = module

    def val_step(self, data: Any) -> Any:
        return self.module.val_step(data)

    def test_step(self, data: Any) -> Any:
        return self.module.test_step(data)

    def train_step(self, data: Any, optim_wrapper: Any) -> Any:  # pragma: no cover - evaluation only
        raise RuntimeError('EvalOnlyModelWrapper is for evaluation; use MMDistributedDataParallel to train')
