"""Named evaluation protocols: one ``protocol=`` argument selects the conventions of a published evaluator.

Each codebase that reports R@K / mR@K fixes a handful of conventions (IoU formula, which images are skipped,
per-image or pooled recall, the mR denominator, the ranking of the triplets, ...). A *protocol* is a named
bundle of those choices; explicit constructor arguments still override single choices. The metrics keep
their constructor signature: every convention argument defaults to :data:`UNSET`, which
:func:`resolve_protocol` replaces by the preset's value. ``protocol='sgb'`` resolves to exactly the
defaults the metrics had before protocols existed.

The presets, what each convention means and which peer file it comes from are tabulated in
``docs/protocols.md``. :func:`describe_conventions` turns resolved settings into the ``conventions`` dict
that the metrics put into their summary (``metrics.json``), so two result files can be compared.
"""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple


class _Unset:
    """Marker of a convention argument the caller did not give (the protocol decides)."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return 'UNSET'

    def __reduce__(self):
        return (_Unset, ())


#: Default of every convention argument of the scene-graph and VLM metrics: "as the protocol says".
UNSET: Any = _Unset()

#: Convention arguments of ``SGRecall`` / ``SGMeanRecall`` (``SceneGraphMetric``).
SCENE_GRAPH_SETTINGS = ('iou_thr', 'iou_plus_one', 'ng_topk', 'rank', 'skip_empty_predictions', 'mr_average',
                        'recall_average', 'match')
#: Convention arguments of ``VLMSceneGraphMetric``.
VLM_SETTINGS = ('iou_thr', 'iou_plus_one', 'rank', 'mr_average', 'recall_average')


@dataclass(frozen=True)
class Protocol:
    """One preset: the settings of the scene-graph metrics and (when defined) of the VLM metric."""
    name: str
    title: str
    source: str  #: peer repository / package and the version or commit read
    scene_graph: Mapping[str, Any]
    vlm: Optional[Mapping[str, Any]] = None
    notes: Tuple[str, ...] = ()
    #: True: detections are assigned to single GT objects and GT triplets de-duplicated (``SGBenchMetric``)
    instance_matching: bool = False


PROTOCOLS: Dict[str, Protocol] = {p.name: p for p in (
    Protocol(
        name='sgb',
        title='Scene-Graph-Benchmark (legacy VG150 / GQA200 protocol; also SHA-GCL, PySGG, IETrans)',
        source='KaihuaTang/Scene-Graph-Benchmark.pytorch, maskrcnn_benchmark/data/datasets/evaluation/vg/',
        scene_graph=dict(iou_thr=0.5, iou_plus_one=None, ng_topk=100, rank='score', skip_empty_predictions=True,
                         mr_average='all', recall_average='image', match='box'),
        vlm=dict(iou_thr=0.5, iou_plus_one=None, rank='given', mr_average='all', recall_average='image'),
    ),
    Protocol(
        name='openpsg',
        title='OpenPSG (PSG benchmark, panoptic segments)',
        source='Jingkang50/OpenPSG@34b2a892f7441966265e3d60ad01ee8eeae89041, openpsg/evaluation/sgg_metrics.py',
        scene_graph=dict(iou_thr=0.5, iou_plus_one=False, ng_topk=100, rank='given', skip_empty_predictions=True,
                         mr_average='all', recall_average='image', match='mask'),
        notes=('OpenPSG computes no no-graph-constraint metrics (ngR, ngmR) with mask matching; the ngR/ngmR '
               'reported under this protocol with match="mask" are mmsgg_eval\'s no-graph-constraint list '
               '(top ng_topk (pair, predicate) scores, mask IoU), not numbers OpenPSG prints.',
               'OpenPSG computes no zero-shot recall; the zR/ngzR reported here are mmsgg_eval\'s, as under '
               'every protocol: over the given zero-shot set or, without one, over the evaluated GT triplets '
               'absent from dataset_meta["train_triplets"] (PSGDataset provides them, so PSG reports zR).',
               'OpenPSG ranks no-graph-constraint entries with an unstable sort; ties keep the input order here.'),
    ),
    Protocol(
        name='r1sgg',
        title='R1-SGG (VLM JSON scene graphs: "whole" recall pooled over all GT triplets)',
        source='gpt4vision/R1-SGG@e4de64d4c4c97edec648021d012198b21a9b1864, src/vg150_eval.py and '
               'src/sgg_gather_preds.py',
        scene_graph=dict(iou_thr=0.5, iou_plus_one=False, ng_topk=100, rank='given', skip_empty_predictions=False,
                         mr_average='present', recall_average='micro', match='box'),
        vlm=dict(iou_thr=0.5, iou_plus_one=False, rank='given', mr_average='present', recall_average='micro'),
        notes=('Deliberate difference: AP@50 numbers GT annotations from 1; R1-SGG numbers them from 0, and '
               'pycocotools then never counts a detection matched to the first GT object as a true positive.',
               'Deliberate difference: names are normalised with whitespace collapsed, so "in  front  of" is '
               '"in front of"; R1-SGG\'s word-split synonym fallback maps it to "in".',
               'Deliberate difference: FailureRate counts every sample, a sample without any answer as a '
               'failure; R1-SGG leaves samples without an answer out of numerator and denominator.',
               'Deliberate difference: per-predicate recalls are not rounded to 4 decimals before averaging.',
               'Not reproduced: R1-SGG\'s WordNet / spaCy synonym lookup and its passive-to-active predicate '
               'table; give a synonym map instead.'),
    ),
    Protocol(
        name='sgbench',
        title='sgbench (Lorenz et al., CVPRW 2024): instance matching, de-duplicated GT triplets',
        source='PyPI sgbench 1.0.0, sgbench/match.py, sgbench/metrics.py, sgbench/file.py, sgbench/pred.py',
        scene_graph=dict(iou_thr=0.5, iou_plus_one=False, ng_topk=100, rank='score', skip_empty_predictions=False,
                         mr_average='present', recall_average='image', match='box'),
        instance_matching=True,
        notes=('Implemented by SGBenchMetric (R@K, mR@K, PairR@K, R@inf, mR@inf, PairR@inf, InstR, PRank).',
               'Deliberate difference: PairR@K compares the first K predictions with every distinct GT pair; '
               'sgbench.metrics.pair_recall also cuts the GT list to its first K entries.',
               'Deliberate difference: mR divides by the predicates present; sgbench returns NaN as soon as '
               'one predicate is absent from every evaluated image.',
               'Deliberate difference: an image without predictions counts 0 in mR as in R; sgbench leaves '
               'images missing from the prediction file out of mR (NaN) but counts them 0 in R and InstR.',
               'Deliberate difference: two zero-area boxes have IoU 0; in sgbench their 0/0 IoU is NaN, which '
               'numpy\'s argmax picks as the best match.'),
    ),
)}


@dataclass
class ResolvedProtocol:
    """Settings after applying a preset and the explicit arguments."""
    name: str
    settings: Dict[str, Any]
    overrides: Dict[str, Any] = field(default_factory=dict)  #: explicit arguments that differ from the preset

    def values(self, names) -> List[Any]:
        return [self.settings[n] for n in names]


def get_protocol(name: str) -> Protocol:
    """The preset called ``name`` (ValueError listing the known ones otherwise)."""
    if name not in PROTOCOLS:
        raise ValueError(f'unknown protocol {name!r}; known protocols: {sorted(PROTOCOLS)} (docs/protocols.md)')
    return PROTOCOLS[name]


def resolve_protocol(name: str, explicit: Mapping[str, Any], target: str = 'scene_graph') -> ResolvedProtocol:
    """Apply preset ``name`` to the arguments ``explicit`` (values :data:`UNSET` take the preset's value).

    ``target``: ``'scene_graph'`` (SGRecall / SGMeanRecall, many-to-many matching), ``'sgbench'``
    (SGBenchMetric, instance matching) or ``'vlm'`` (VLMSceneGraphMetric).
    """
    protocol = get_protocol(name)
    if target in ('scene_graph', 'sgbench') and protocol.instance_matching != (target == 'sgbench'):
        if protocol.instance_matching:
            raise ValueError(f'protocol {name!r} matches detections to single GT objects: use SGBenchMetric '
                             f'(type=\'SGBenchMetric\') instead of SGRecall / SGMeanRecall')
        raise ValueError(f'SGBenchMetric implements instance matching only (protocol=\'sgbench\'), not {name!r}')
    preset = protocol.vlm if target == 'vlm' else protocol.scene_graph
    if preset is None:
        raise ValueError(f'protocol {name!r} defines no conventions for {target} metrics; use one of '
                         f'{sorted(p.name for p in PROTOCOLS.values() if getattr(p, target) is not None)}')
    unknown = set(explicit) - set(preset)
    if unknown:
        raise ValueError(f'protocol {name!r}: not a convention argument: {sorted(unknown)}')
    settings, overrides = {}, {}
    for key, default in preset.items():
        value = explicit.get(key, UNSET)
        if value is UNSET:
            settings[key] = default
        else:
            settings[key] = value
            if value != default:
                overrides[key] = value
    return ResolvedProtocol(name, settings, overrides)


def _iou_text(plus_one: Optional[bool], match: str) -> str:
    if match == 'mask':
        return 'mask IoU |A and B| / (|A| + |B| - |A and B|) (pixel counts)'
    if plus_one is None:
        return 'dataset default (dataset_meta iou_plus_one: +1 pixel for VG150/GQA200, plain otherwise)'
    if plus_one:
        return '+1 pixel: area = (x2 - x1 + 1)(y2 - y1 + 1), intersection side min - max + 1 clamped at 0'
    return 'plain: area = (x2 - x1)(y2 - y1), intersection side min - max clamped at 0'


def describe_conventions(resolved: ResolvedProtocol, mode: str = 'sgdet', plus_one: Optional[bool] = None,
                         target: str = 'scene_graph') -> Dict[str, Any]:
    """Every convention the resolved settings imply, as strings and numbers (JSON-ready).

    ``plus_one``: the IoU convention actually used (known once ``dataset_meta`` is set), else the setting.
    """
    s = resolved.settings
    protocol = get_protocol(resolved.name)
    match = s.get('match', 'box')
    if plus_one is None:
        plus_one = s['iou_plus_one']
    if protocol.instance_matching:
        matching = ('instance matching: each detection is assigned to the GT object of highest IoU among those '
                    'with its label (IoU >= threshold, first GT on ties); a predicted triplet hits the GT triplet '
                    'with its assigned subject, assigned object and predicate; repeated predicted triplets are '
                    'dropped before taking the first K')
    elif mode == 'phrdet':
        matching = ('many-to-many on the union box of subject and object: classes and predicate equal, '
                    'union IoU >= threshold')
    else:
        matching = ('many-to-many: subject class, object class and predicate equal and both ends matched '
                    f'({"mask" if match == "mask" else "box"} IoU >= threshold); a prediction may hit several GT '
                    'relations and a GT relation may be hit by several predictions')
    skipped = ['images without GT relations']
    if s.get('skip_empty_predictions', target == 'scene_graph'):
        skipped.append('images without predicted pairs')
    out: Dict[str, Any] = {
        'protocol': resolved.name,
        'title': protocol.title,
        'source': protocol.source,
        'overrides': dict(resolved.overrides),
        'iou': _iou_text(plus_one, match),
        'iou_threshold': f'>= {s["iou_thr"]}',
        'matching': matching,
        'gt_deduplication': ('one GT triplet per distinct (subject, object, predicate) index triplet'
                             if protocol.instance_matching else
                             'none: every GT relation counts, duplicated triplets included'),
        'skipped_images': ' and '.join(skipped) + ('' if 'images without predicted pairs' in skipped
                                                     else ' (an image without predictions counts 0)'),
        'recall': 'pooled: sum of hits / sum of GT relations' if s['recall_average'] == 'micro'
        else 'per image: mean over images of hits / GT relations',
        'mean_recall_denominator': 'predicates present in the evaluated GT' if s['mr_average'] == 'present'
        else 'all predicates of the dataset (an absent predicate counts 0)',
        'ranking': 'given order (the model\'s own ranking)' if s['rank'] == 'given'
        else 'stable descending sort by predicate prob x subject score x object score (float32; ties keep '
             'the input order)',
    }
    if target != 'vlm':
        out['ngc_list'] = (f'top {s["ng_topk"]} (pair, predicate) entries per image by subject score x object '
                           'score x predicate prob, stable descending')
    else:
        out['ngc_list'] = 'not used (one predicate per predicted relation)'
        out['ap50'] = ('COCO AP at IoU 0.5 (pycocotools), GT annotation ids from 1, '
                       + ('+1 pixel widths/heights' if plus_one else 'plain widths/heights'))
    if protocol.instance_matching:
        out['ngc_list'] += ' (used for PRank only)'
    out['notes'] = list(protocol.notes)
    return out
