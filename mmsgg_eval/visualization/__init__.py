"""Scene-graph drawing the mmdet way: :class:`~.scene_graph.SceneGraphLocalVisualizer` in mmdet's
``VISUALIZERS`` (``visualizer=dict(type='SceneGraphLocalVisualizer')``; ``tools/test.py --show-dir DIR``).

``import mmsgg_eval`` only registers the name: the module (which imports ``mmdet.visualization`` and
matplotlib) is imported when the visualizer is first built. The placeholder builds it through
``get_instance`` (MMEngine's ``ManagerMixin``), as the registry does for a visualizer class, so that
``Visualizer.get_current_instance()`` (mmdet's ``DetVisualizationHook``) finds it.
"""
import importlib
from typing import Any

NAME = 'SceneGraphLocalVisualizer'
MODULE = f'{__name__}.scene_graph'


def _register() -> None:
    from ..registry import VISUALIZERS
    if NAME in VISUALIZERS.module_dict:
        return

    def build_after_import(name: str = 'visualizer', **kwargs: Any) -> Any:
        module = importlib.import_module(MODULE)
        return module.SceneGraphLocalVisualizer.get_instance(name, **kwargs)

    build_after_import.__name__ = build_after_import.__qualname__ = NAME
    build_after_import.__module__ = MODULE
    build_after_import.__doc__ = f'{NAME} from {MODULE} (imported when first built).'
    VISUALIZERS.register_module(name=NAME, module=build_after_import)


_register()
