"""Dataset wrappers (VG150, GQA200, OIv6, PSG, RSVGD) reading the real annotation files, and their transforms.

Importing this package registers the datasets in mmdet's ``DATASETS`` and the transforms in ``TRANSFORMS``
(MMEngine's root registries when mmdet is absent). No compiled mmcv op is imported.
"""
from .base import AnnotationDataset, DatasetFormatError, SceneGraphDataset
from .gqa200 import GQA200Dataset
from .oiv6 import OIv6Dataset
from .psg import PSGDataset
from .rsvgd import DIOR_CLASSES, RSVGDDataset
from .transforms import LoadSceneGraphAnnotations, PackSceneGraphInputs
from .vg150 import VG150Dataset

__all__ = ['AnnotationDataset', 'SceneGraphDataset', 'DatasetFormatError', 'VG150Dataset', 'GQA200Dataset',
           'OIv6Dataset', 'PSGDataset', 'RSVGDDataset', 'DIOR_CLASSES', 'LoadSceneGraphAnnotations', 'PackSceneGraphInputs']
