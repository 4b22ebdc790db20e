"""Open-vocabulary splits of scene-graph vocabularies: base / novel object classes and predicates.

Open-vocabulary SGG (OvSGTR, ECCV 2024; "Towards Open-vocabulary Scene Graph Generation with Prompt-based
Finetuning", ECCV 2022) trains on the BASE part of a vocabulary and reports recall on the NOVEL part:

* **OvD** (novel objects): training boxes of a novel class are relabelled to one of its base "parent" classes, or
  dropped with their relations when it has none; images left with fewer than 2 boxes or no relation are removed.
  Evaluation: recall over the GT relations whose subject AND object are both novel classes.
* **OvR** (novel predicates): training relations with a novel predicate are dropped; images left without a
  relation are removed. Evaluation: recall over the GT relations with a novel predicate.
* **OvD+R**: both; reported as Joint (all relations), Novel Object and Novel Relation recall.

The test split is never changed. The VG150 tables below are written from OvSGTR's own lists (public repository
gpt4vision/OvSGTR, commit 91afa5b: ``datasets/vg.py`` ``VG150_NOVEL2BASE`` and ``VG150_NOVEL_PREDICATE``; the
base lists there are the complements, and the 1-based index lists of ``datasets/sgg_metrics.py``
``OvdSGZeroShotRecall`` / ``OvrSGZeroShotRecall`` name exactly the same classes and predicates). OvSGTR picks a
novel box's parent with Python's unseeded ``random.choice`` (a different training set each run); here the pick is
seeded (:func:`parent_choice`), so two runs with the same seed build the same set.
"""
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

#: VG150 novel object classes (45) -> the base classes a training box of that class is relabelled to (OvD).
VG150_NOVEL_OBJECT_PARENTS: Dict[str, Tuple[str, ...]] = {
    'bed': (),
    'bench': ('seat',),
    'bike': ('vehicle', 'motorcycle'),
    'boy': ('men',),
    'building': (),
    'bus': ('vehicle',),
    'car': ('vehicle',),
    'cat': ('animal',),
    'chair': ('seat',),
    'dog': ('animal',),
    'door': (),
    'ear': (),
    'elephant': ('animal',),
    'fence': (),
    'giraffe': ('animal',),
    'girl': ('lady',),
    'glass': (),
    'hair': (),
    'hand': ('paw',),
    'hat': ('cap',),
    'head': ('men',),
    'horse': ('animal',),
    'jacket': ('coat',),
    'leg': ('branch',),
    'man': ('animal',),
    'pant': (),
    'person': ('people',),
    'plane': ('airplane',),
    'plate': ('food',),
    'pole': (),
    'shirt': (),
    'shoe': (),
    'short': (),
    'sign': ('house',),
    'snow': (),
    'street': ('sidewalk',),
    'table': ('board', 'desk'),
    'tail': (),
    'track': ('railing',),
    'train': ('vehicle',),
    'tree': ('plant',),
    'wheel': ('tire',),
    'window': (),
    'woman': ('lady',),
    'zebra': ('animal',),
}

#: VG150 novel predicates (15) (OvR).
VG150_NOVEL_PREDICATES: Tuple[str, ...] = (
    'belonging to', 'part of', 'riding', 'walking in', 'in', 'of', 'painted on', 'playing', 'for',
    'walking on', 'says', 'attached to', 'eating', 'on', 'wears',
)

#: Named splits: the novel objects / predicates each evaluates, and what the training split drops.
SPLITS: Dict[str, Dict[str, Any]] = {
    'ovsgtr-ovd': dict(setting='ovd', novel_objects=tuple(VG150_NOVEL_OBJECT_PARENTS), novel_predicates=()),
    'ovsgtr-ovr': dict(setting='ovr', novel_objects=(), novel_predicates=VG150_NOVEL_PREDICATES),
    'ovsgtr-ovdr': dict(setting='ovdr', novel_objects=tuple(VG150_NOVEL_OBJECT_PARENTS),
                        novel_predicates=VG150_NOVEL_PREDICATES),
}
#: dataset-side names (``VG150Dataset(open_vocab_split=...)``) of the splits above
DATASET_SPLITS = {'ovd': 'ovsgtr-ovd', 'ovr': 'ovsgtr-ovr', 'ovdr': 'ovsgtr-ovdr'}
SOURCE = 'OvSGTR (gpt4vision/OvSGTR@91afa5b, datasets/vg.py, datasets/sgg_metrics.py)'


def split_table(name: str) -> Dict[str, Any]:
    """The table of a named split ('ovsgtr-ovd' | 'ovsgtr-ovr' | 'ovsgtr-ovdr', or the dataset names 'ovd' |
    'ovr' | 'ovdr'); ValueError listing the names otherwise."""
    key = DATASET_SPLITS.get(name, name)
    if key not in SPLITS:
        raise ValueError(f'unknown open-vocabulary split {name!r}; expected one of {tuple(SPLITS)} (metrics) or '
                         f'{tuple(DATASET_SPLITS)} (datasets)')
    return dict(SPLITS[key], name=key, source=SOURCE)


def name_indices(names: Sequence[str], vocabulary: Sequence[str], what: str, owner: str) -> List[int]:
    """0-based indices of ``names`` in ``vocabulary``; a ValueError names the unknown ones (and ``owner``)."""
    position = {n: i for i, n in enumerate(vocabulary)}
    unknown = [n for n in names if n not in position]
    if unknown:
        raise ValueError(f'{owner}: {len(unknown)} {what} not in the dataset\'s {what}: {unknown[:10]}'
                         f'{" ..." if len(unknown) > 10 else ""} (names must be spelled as in dataset_meta)')
    return sorted({position[n] for n in names})


def parent_choice(num_parents: np.ndarray, seed: int) -> np.ndarray:
    """[N] index of the parent picked for each of N boxes, uniform over its ``num_parents`` (0: none, -1),
    deterministic for ``seed`` (one draw per box in the given order)."""
    draws = np.random.default_rng(seed).random(len(num_parents))
    picked = np.floor(draws * np.maximum(num_parents, 1)).astype(np.int64)
    return np.where(num_parents > 0, picked, -1)


def base_training_graphs(graphs: Mapping[str, np.ndarray], classes: Sequence[str], predicates: Sequence[str],
                         setting: str, seed: int = 0,
                         parents: Optional[Mapping[str, Sequence[str]]] = None,
                         novel_predicates: Optional[Sequence[str]] = None) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
    """The base-only training set of parsed graphs (``obj_counts`` [I], ``labels`` [N] 0-based, ``obj_rows``
    [N], ``image_of_rel`` [R], ``relations`` [R, 3] local (subject, object, 0-based predicate)) under
    ``setting`` 'ovd' | 'ovr' | 'ovdr' (module docstring). Returns (graphs, kept image positions [I'])."""
    parents = VG150_NOVEL_OBJECT_PARENTS if parents is None else parents
    novel_predicates = VG150_NOVEL_PREDICATES if novel_predicates is None else novel_predicates
    counts = np.asarray(graphs['obj_counts'], np.int64)
    labels = np.asarray(graphs['labels'], np.int64).copy()
    rels = np.asarray(graphs['relations'], np.int64).reshape(-1, 3)
    image_of_rel = np.asarray(graphs['image_of_rel'], np.int64)
    keep_obj = np.ones(len(labels), bool)
    keep_img = np.ones(len(counts), bool)
    if setting in ('ovd', 'ovdr'):
        index = {n: i for i, n in enumerate(classes)}
        novel = np.zeros(len(classes), bool)
        novel[name_indices(list(parents), classes, 'classes', 'open-vocabulary split')] = True
        options = [[index[p] for p in parents.get(c, ())] if novel[i] else [] for i, c in enumerate(classes)]
        is_novel = novel[labels]
        num_parents = np.array([len(options[c]) for c in labels], np.int64) * is_novel
        pick = parent_choice(np.where(is_novel, num_parents, 0), seed)
        relabel = is_novel & (pick >= 0)
        labels[relabel] = [options[c][k] for c, k in zip(labels[relabel], pick[relabel])]
        keep_obj = ~is_novel | relabel
    if setting in ('ovr', 'ovdr'):
        novel_pred = np.zeros(len(predicates), bool)
        novel_pred[name_indices(list(novel_predicates), predicates, 'predicates', 'open-vocabulary split')] = True
    else:
        novel_pred = np.zeros(len(predicates), bool)
    start = np.cumsum(counts) - counts
    subject, obj = start[image_of_rel] + rels[:, 0], start[image_of_rel] + rels[:, 1]
    keep_rel = keep_obj[subject] & keep_obj[obj] & ~novel_pred[rels[:, 2]]
    new_local = np.cumsum(keep_obj) - 1
    new_counts = np.bincount(np.repeat(np.arange(len(counts)), counts)[keep_obj], minlength=len(counts))
    new_start = np.cumsum(new_counts) - new_counts
    kept_rels = np.stack([new_local[subject] - new_start[image_of_rel], new_local[obj] - new_start[image_of_rel],
                          rels[:, 2]], 1)[keep_rel]
    kept_image_of_rel = image_of_rel[keep_rel]
    rel_counts = np.bincount(kept_image_of_rel, minlength=len(counts))
    keep_img = rel_counts > 0
    if setting in ('ovd', 'ovdr'):
        keep_img &= new_counts >= 2
    # images kept, objects of the kept images, relations of the kept images
    obj_keep = keep_obj & np.repeat(keep_img, counts)
    new_pos = np.cumsum(keep_img) - 1
    rel_keep_img = keep_img[kept_image_of_rel]
    out = dict(graphs, obj_rows=np.asarray(graphs['obj_rows'])[obj_keep], obj_counts=new_counts[keep_img],
               labels=labels[obj_keep], image_of_rel=new_pos[kept_image_of_rel[rel_keep_img]],
               relations=kept_rels[rel_keep_img])
    return out, np.flatnonzero(keep_img)
