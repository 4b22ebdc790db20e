"""The encoder registry (:data:`ENCODERS`), building an encoder from a config and the optional-dependency guard."""
from typing import Any, Optional

from mmengine.registry import Registry

__all__ = ['ENCODERS', 'build_encoder', 'is_encoder']


def _build_from_cfg(cfg: Any, registry: Registry, default_args: Optional[dict] = None) -> Any:
    """Build ``cfg['type'](**rest)`` from this registry only (no MMEngine scope switching)."""
    args = dict(default_args or {})
    args.update(dict(cfg))
    obj_type = args.pop('type', None)
    if obj_type is None:
        raise KeyError(f'encoder config needs a `type` (one of {sorted(registry.module_dict)}), got {dict(cfg)}')
    obj_cls = registry.get(obj_type) if isinstance(obj_type, str) else obj_type
    if obj_cls is None:
        raise KeyError(f'unknown encoder type {obj_type!r}; registered: {sorted(registry.module_dict)}')
    return obj_cls(**args)


ENCODERS = Registry('clip encoder', build_func=_build_from_cfg, scope='mmsgg_eval')


def is_encoder(obj: Any) -> bool:
    """True when ``obj`` implements the encoder protocol (``encode_image`` and ``encode_text``)."""
    return callable(getattr(obj, 'encode_image', None)) and callable(getattr(obj, 'encode_text', None))


def build_encoder(cfg: Any) -> Any:
    """An encoder from a config dict (``type`` in :data:`ENCODERS`), or ``cfg`` itself if already built."""
    if is_encoder(cfg):
        return cfg
    if isinstance(cfg, dict):
        return ENCODERS.build(cfg)
    raise TypeError(f'encoder must be a config dict or an object with encode_image/encode_text, got {type(cfg)}')


def _require(module: str, extra: str, what: str):
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f'{what} needs the optional dependency `{module}` ({err}); install it with '
                          f"`pip install 'mmsgg_eval[{extra}]'`") from None
