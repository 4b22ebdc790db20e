"""The vocabularies of the sample datasets: the real VG150, COCO panoptic, PSG and OIv6 predicate names, a DIOR
subset.

``VG150_PREDICATES`` is the one of :mod:`mmsgg_eval.vocabularies` (beside the VG150 predicate groups).
"""
from typing import Sequence

from ..vocabularies import VG150_PREDICATES


# The VG150 classes in the order of ``VG-SGG-dicts-with-attri.json`` (``idx_to_label`` '1'..'150').
VG150_CLASSES = (
    'airplane', 'animal', 'arm', 'bag', 'banana', 'basket', 'beach', 'bear', 'bed', 'bench', 'bike', 'bird', 'board',
    'boat', 'book', 'boot', 'bottle', 'bowl', 'box', 'boy', 'branch', 'building', 'bus', 'cabinet', 'cap', 'car', 'cat',
    'chair', 'child', 'clock', 'coat', 'counter', 'cow', 'cup', 'curtain', 'desk', 'dog', 'door', 'drawer', 'ear',
    'elephant', 'engine', 'eye', 'face', 'fence', 'finger', 'flag', 'flower', 'food', 'fork', 'fruit', 'giraffe',
    'girl', 'glass', 'glove', 'guy', 'hair', 'hand', 'handle', 'hat', 'head', 'helmet', 'hill', 'horse', 'house',
    'jacket',
    'jean', 'kid', 'kite', 'lady', 'lamp', 'laptop', 'leaf', 'leg', 'letter', 'light', 'logo', 'man', 'men',
    'motorcycle', 'mountain', 'mouth', 'neck', 'nose', 'number', 'orange', 'pant', 'paper', 'paw', 'people', 'person',
    'phone', 'pillow', 'pizza', 'plane', 'plant', 'plate', 'player', 'pole', 'post', 'pot', 'racket', 'railing', 'rock',
    'roof', 'room', 'screen', 'seat', 'sheep', 'shelf', 'shirt', 'shoe', 'short', 'sidewalk', 'sign', 'sink',
    'skateboard', 'ski', 'skier', 'sneaker', 'snow', 'sock', 'stand', 'street', 'surfboard', 'table', 'tail', 'tie',
    'tile', 'tire', 'toilet', 'towel', 'tower', 'track', 'train', 'tree', 'truck', 'trunk', 'umbrella', 'vase',
    'vegetable', 'vehicle', 'wave', 'wheel', 'window', 'windshield', 'wing', 'wire', 'woman', 'zebra')
# VG150 predicates from most to least frequent (order of the real training counts): the sample's long tail.
VG150_PREDICATES_BY_FREQUENCY = (
    'on', 'has', 'in', 'of', 'wearing', 'near', 'with', 'above', 'holding', 'behind', 'under', 'sitting on', 'wears',
    'standing on', 'in front of', 'attached to', 'at', 'hanging from', 'over', 'for', 'riding', 'carrying', 'eating',
    'walking on', 'playing', 'covering', 'laying on', 'along', 'watching', 'and', 'between', 'belonging to',
    'painted on', 'against', 'looking at', 'from', 'parked on', 'to', 'made of', 'covered in', 'mounted on', 'says',
    'part of', 'across', 'flying in', 'using', 'on back of', 'lying on', 'growing on', 'walking in')
# The COCO panoptic thing and stuff classes and the PSG predicates, as ``psg.json`` lists them.
COCO_THING_CLASSES = (
    'person', 'bicycle', 'car', 'motorcycle', 'airplane', 'bus', 'train', 'truck', 'boat', 'traffic light',
    'fire hydrant', 'stop sign', 'parking meter', 'bench', 'bird', 'cat', 'dog', 'horse', 'sheep', 'cow', 'elephant',
    'bear', 'zebra', 'giraffe', 'backpack', 'umbrella', 'handbag', 'tie', 'suitcase', 'frisbee', 'skis', 'snowboard',
    'sports ball', 'kite', 'baseball bat', 'baseball glove', 'skateboard', 'surfboard', 'tennis racket', 'bottle',
    'wine glass', 'cup', 'fork', 'knife', 'spoon', 'bowl', 'banana', 'apple', 'sandwich', 'orange', 'broccoli',
    'carrot', 'hot dog', 'pizza', 'donut', 'cake', 'chair', 'couch', 'potted plant', 'bed', 'dining table', 'toilet',
    'tv', 'laptop', 'mouse', 'remote', 'keyboard', 'cell phone', 'microwave', 'oven', 'toaster', 'sink',
    'refrigerator', 'book', 'clock', 'vase', 'scissors', 'teddy bear', 'hair drier', 'toothbrush')
COCO_STUFF_CLASSES = (
    'banner', 'blanket', 'bridge', 'cardboard', 'counter', 'curtain', 'door-stuff', 'floor-wood', 'flower', 'fruit',
    'gravel', 'house', 'light', 'mirror-stuff', 'net', 'pillow', 'platform', 'playingfield', 'railroad', 'river',
    'road', 'roof', 'sand', 'sea', 'shelf', 'snow', 'stairs', 'tent', 'towel', 'wall-brick', 'wall-stone',
    'wall-tile', 'wall-wood', 'water-other', 'window-blind', 'window-other', 'tree-merged', 'fence-merged',
    'ceiling-merged', 'sky-other-merged', 'cabinet-merged', 'table-merged', 'floor-other-merged', 'pavement-merged',
    'mountain-merged', 'grass-merged', 'dirt-merged', 'paper-merged', 'food-other-merged', 'building-other-merged',
    'rock-merged', 'wall-other-merged', 'rug-merged')
PSG_PREDICATES = (
    'over', 'in front of', 'beside', 'on', 'in', 'attached to', 'hanging from', 'on back of', 'falling off',
    'going down', 'painted on', 'walking on', 'running on', 'crossing', 'standing on', 'lying on', 'sitting on',
    'flying over', 'jumping over', 'jumping from', 'wearing', 'holding', 'carrying', 'looking at', 'guiding',
    'kissing', 'eating', 'drinking', 'feeding', 'biting', 'catching', 'picking', 'playing with', 'chasing',
    'climbing', 'cleaning', 'playing', 'touching', 'pushing', 'pulling', 'opening', 'cooking', 'talking to',
    'throwing', 'slicing', 'driving', 'riding', 'parked on', 'driving on', 'about to hit', 'kicking', 'swinging',
    'entering', 'exiting', 'enclosing', 'leaning on')
# The 30 Open Images V6 relationship names of PySGG's ``categories_dict.json`` (``rel``); the OIv6 sample's
# object classes are a few real Open Images names followed by placeholders (``mmsgg_eval.testing.oiv6``).
OIV6_PREDICATES = (
    'at', 'holds', 'wears', 'surf', 'hang', 'drink', 'holding_hands', 'on', 'ride', 'dance', 'skateboard', 'catch',
    'highfive', 'inside_of', 'eat', 'cut', 'contain', 'handshake', 'kiss', 'talk_on_phone', 'interacts_with',
    'under', 'hug', 'throw', 'hits', 'snowboard', 'kick', 'ski', 'plays', 'read')
OIV6_SAMPLE_REAL_CLASSES = (
    'Man', 'Woman', 'Person', 'Girl', 'Boy', 'Table', 'Guitar', 'Chair', 'Car', 'Bottle', 'Mobile phone', 'Horse',
    'Dog', 'Beer', 'Microphone', 'Football', 'Bicycle', 'Hat', 'Sunglasses', 'Handbag', 'Book', 'Coffee cup',
    'Wine glass', 'Drum', 'Piano', 'Skateboard', 'Surfboard', 'Ski', 'Snowboard', 'Tennis racket')
# A subset of the DIOR categories (``DIOR_CLASSES``), in the order the RSVGD sample draws from.
DIOR_SAMPLE_CLASSES = ('airplane', 'bridge', 'golffield', 'ship', 'storagetank', 'vehicle', 'windmill',
                       'Expressway-Service-area', 'groundtrackfield', 'tenniscourt')

__all__: Sequence[str] = ('VG150_CLASSES', 'VG150_PREDICATES', 'VG150_PREDICATES_BY_FREQUENCY', 'COCO_THING_CLASSES',
                          'COCO_STUFF_CLASSES', 'PSG_PREDICATES', 'DIOR_SAMPLE_CLASSES', 'OIV6_PREDICATES',
                          'OIV6_SAMPLE_REAL_CLASSES')
