"""Registries used by mmsgg_eval.

Components register into MMDetection's registries so that an MMDet 3.x config with
``custom_imports=dict(imports=['mmsgg_eval'])`` finds them under ``default_scope='mmdet'``.
``mmdet.registry`` needs neither compiled mmcv ops nor mmdet's model code; when mmdet is not
installed at all, MMEngine's root registries are used instead (the metrics still work).

A component whose module is slow to import (e.g. a model: ``mmengine.model`` imports MMEngine's optimizers,
which import ``transformers``) is registered with :func:`register_lazily`: ``import mmsgg_eval`` registers
its name, and its module is imported the first time it is built.

Building by name through a registry (``DATASETS.build(dict(type='VG150Dataset'))``) first imports the
registry's whole location (``mmdet.datasets``, which imports ``transformers`` and matplotlib: seconds of
start-up; ``mmdet.evaluation`` for metrics). Code that builds mmsgg_eval's own components (the offline CLI)
passes the config through :func:`resolve_registered`, which skips that import for them; other types (mmdet's
datasets, transforms, models) are built as before.
"""
import importlib
from typing import Any, Dict, Mapping

try:
    from mmdet.registry import DATASETS, METRICS, MODEL_WRAPPERS, MODELS, TRANSFORMS, VISUALIZERS
except ImportError:  # pragma: no cover - exercised only without mmdet
    from mmengine.registry import DATASETS, METRICS, MODEL_WRAPPERS, MODELS, TRANSFORMS, VISUALIZERS

__all__ = ['DATASETS', 'METRICS', 'MODELS', 'MODEL_WRAPPERS', 'TRANSFORMS', 'VISUALIZERS', 'register_lazily',
           'resolve_registered']


def register_lazily(registry: Any, name: str, module: str) -> None:
    """Register ``name`` in ``registry`` as a placeholder that imports ``module`` when first called.

    ``module`` must define the real class and register it under the same name with
    ``register_module(force=True)``, replacing the placeholder; the placeholder then builds the real class,
    and every later ``registry.get(name)`` returns the class itself.
    """
    def build_after_import(*args: Any, **kwargs: Any) -> Any:
        importlib.import_module(module)
        cls = registry.module_dict.get(name)  # not registry.get(): that imports all of mmdet's models
        if cls is build_after_import or cls is None:
            raise RuntimeError(f'{module} did not register {name!r} in the {registry.name} registry '
                               f'(it must use register_module(force=True))')
        return cls(*args, **kwargs)

    build_after_import.__name__ = build_after_import.__qualname__ = name
    build_after_import.__module__ = module
    build_after_import.__doc__ = f'{name} from {module} (imported when first built).'
    registry.register_module(name=name, module=build_after_import)


def resolve_registered(registry: Any, cfg: Mapping) -> Dict[str, Any]:
    """A copy of the component config ``cfg`` whose ``type`` name is replaced by the class registered under it in
    ``registry`` itself, when there is one (a scope prefix equal to the registry's scope, e.g. ``mmdet.``, is
    accepted); ``registry.build`` of the copy then skips the import of the registry's location (module
    docstring). Any other ``type`` is left as it is, for the registry to find (importing its location)."""
    out = dict(cfg)
    kind = out.get('type')
    if isinstance(kind, str):
        scope, name = registry.split_scope_key(kind)
        if scope in (None, registry.scope) and name in registry.module_dict:
            out['type'] = registry.module_dict[name]
    return out
