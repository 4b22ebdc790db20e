"""CLIP-family encoders: tiny randomly initialised open_clip / transformers models are saved to a temp dir and
loaded back through the user's code path (``build_encoder(dict(type=..., ...))``), on CPU. Tests needing an
optional package skip cleanly when it is missing."""
import json
import os
import sys
import warnings

import pytest
import torch

from mmsgg_eval.encoders import (ENCODERS, ImagePreprocess, build_encoder, crop_regions, is_encoder)

TINY_OPENCLIP = {'embed_dim': 16, 'quick_gelu': True,
                 'vision_cfg': {'image_size': 224, 'layers': 1, 'width': 32, 'patch_size': 32, 'head_width': 16},
                 'text_cfg': {'context_length': 16, 'vocab_size': 49408, 'width': 32, 'heads': 2, 'layers': 1}}
WORDS = ['<pad>', '<unk>', '<bos>', '<eos>', 'man', 'riding', 'horse', 'on', 'street', 'dog', 'near', 'car',
         'has', 'wheel', 'a', 'photo', 'of']

# Crop equivalence tolerance (pixel values in [0, 1]): batched roi_align crop vs PIL crop + the model's own
# transform. Measured at 224 px: mean ~0.002, max ~0.03 (box-filter vs bicubic anti-aliasing, uint8 rounding).
CROP_MEAN_TOL = 0.01
CROP_MAX_TOL = 0.06


def smooth_image(height: int, width: int, seed: int = 0) -> torch.Tensor:
    """A natural-looking RGB uint8 [3, H, W] test image: upsampled noise plus gradients and a fine pattern."""
    g = torch.Generator().manual_seed(seed)
    low = torch.rand(1, 3, max(height // 8, 2), max(width // 8, 2), generator=g)
    img = torch.nn.functional.interpolate(low, size=(height, width), mode='bicubic', align_corners=False)[0]
    yy, xx = torch.meshgrid(torch.linspace(0, 1, height), torch.linspace(0, 1, width), indexing='ij')
    img = 0.6 * img + 0.2 * torch.stack([xx, yy, (xx + yy) / 2]) + 0.1 * torch.sin(xx * 40)
    return (img.clamp(0, 1) * 255).round().to(torch.uint8)


def make_openclip_dir(root: str, seed: int = 0) -> str:
    """Tiny random open_clip CLIP saved as ``local-dir`` (open_clip_config.json + weights); returns the dir."""
    from open_clip.model import CLIP
    torch.manual_seed(seed)
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, 'open_clip_config.json'), 'w') as f:
        json.dump({'model_cfg': TINY_OPENCLIP, 'preprocess_cfg': {}}, f)
    torch.save(CLIP(**TINY_OPENCLIP).state_dict(), os.path.join(root, 'open_clip_pytorch_model.bin'))
    return root


def make_hf_dir(root: str, kind: str, seed: int = 0) -> str:
    """Tiny random transformers CLIP or SigLIP + word-level tokenizer + image processor, via save_pretrained."""
    import transformers
    torch.manual_seed(seed)
    tokenizer = word_tokenizer()
    text = dict(vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                num_attention_heads=2, max_position_embeddings=16, pad_token_id=0, bos_token_id=2, eos_token_id=3)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=224,
                  patch_size=32)
    if kind == 'clip':
        model = transformers.CLIPModel(transformers.CLIPConfig(text_config=text, vision_config=vision,
                                                               projection_dim=16))
        processor = transformers.CLIPImageProcessor(size={'shortest_edge': 224},
                                                    crop_size={'height': 224, 'width': 224})
    else:
        model = transformers.SiglipModel(transformers.SiglipConfig(text_config=text, vision_config=vision))
        with torch.no_grad():  # non-trivial sigmoid head
            model.logit_scale.fill_(1.5)
            model.logit_bias.fill_(-0.5)
        processor = transformers.SiglipImageProcessor(size={'height': 224, 'width': 224})
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        model.save_pretrained(root)
    tokenizer.save_pretrained(root)
    processor.save_pretrained(root)
    return root


def word_tokenizer():
    """A word-level fast tokenizer over WORDS (``<bos> text <eos>``), saved with the tiny models."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    vocab = {w: i for i, w in enumerate(WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token='<unk>'))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single='<bos> $A <eos>',
                                                       special_tokens=[('<bos>', 2), ('<eos>', 3)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token='<pad>', unk_token='<unk>',
                                                bos_token='<bos>', eos_token='<eos>')


def make_blip2_dir(root: str, seed: int = 0) -> str:
    """Tiny random BLIP-2 image-text-retrieval model (1-layer vision tower and Q-Former with text input) +
    word-level tokenizer + BLIP image processor, via save_pretrained; returns the dir."""
    import transformers
    torch.manual_seed(seed)
    config = transformers.Blip2Config(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           image_size=224, patch_size=32),
        qformer_config=dict(vocab_size=len(WORDS), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=64, encoder_hidden_size=32, max_position_embeddings=16,
                            use_qformer_text_input=True, pad_token_id=0),
        num_query_tokens=4, image_text_hidden_size=16)
    model = transformers.Blip2ForImageTextRetrieval(config).eval()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        model.save_pretrained(root)
    word_tokenizer().save_pretrained(root)
    transformers.BlipImageProcessor(size={'height': 224, 'width': 224}).save_pretrained(root)
    return root


@pytest.fixture(scope='module')
def openclip_dir(tmp_path_factory):
    pytest.importorskip('open_clip')
    return make_openclip_dir(str(tmp_path_factory.mktemp('openclip')))


@pytest.fixture(scope='module', params=['clip', 'siglip'])
def hf_dir(request, tmp_path_factory):
    pytest.importorskip('transformers')
    return request.param, make_hf_dir(str(tmp_path_factory.mktemp(f'hf_{request.param}')), request.param)


def hf_type(kind: str) -> str:
    return 'HFCLIPEncoder' if kind == 'clip' else 'HFSigLIPEncoder'


# ------------------------------------------------------------------------------------------------ open_clip
def test_openclip_local_dir_and_checkpoint_file(openclip_dir, tmp_path):
    import open_clip
    enc = build_encoder(dict(type='OpenCLIPEncoder', model_name=f'local-dir:{openclip_dir}'))
    assert is_encoder(enc) and enc.score == 'cosine'
    assert enc.preprocess.output_size == (224, 224) and enc.preprocess.resize_mode == 'shortest'
    images = torch.rand(3, 3, 120, 90)
    texts = ['man riding horse', 'dog near car']
    img_a, txt_a = enc.encode_image(images), enc.encode_text(texts)
    assert img_a.shape == (3, 16) and txt_a.shape == (2, 16) and img_a.dtype == torch.float32
    assert torch.equal(img_a, enc.encode_image(images)) and torch.equal(txt_a, enc.encode_text(texts))
    # the model's own forward on the model's own preprocessing
    pixels = enc.preprocess(images)
    assert torch.allclose(img_a, enc.model.encode_image(pixels).detach(), atol=1e-6)
    # the text tower runs only up to the end-of-text token (causal mask): same result as the full 77 tokens
    long_texts = texts + ['a photo of a man riding a horse on a street near a car with a wheel']
    with torch.no_grad():
        full = enc.model.encode_text(enc.tokenizer(long_texts))
    assert torch.allclose(enc.encode_text(long_texts), full, atol=1e-5)
    # built-in-style architecture name + local checkpoint file (the NegCLIP / CLIP path)
    cfg_path = tmp_path / 'mmsgg-tiny-test.json'
    cfg_path.write_text(json.dumps(TINY_OPENCLIP))
    open_clip.add_model_config(str(cfg_path))
    enc2 = build_encoder(dict(type='OpenCLIPEncoder', model_name='mmsgg-tiny-test',
                              pretrained=os.path.join(openclip_dir, 'open_clip_pytorch_model.bin')))
    assert torch.allclose(enc2.encode_image(images), img_a, atol=1e-6)
    assert torch.allclose(enc2.encode_text(texts), txt_a, atol=1e-6)
    # a TorchScript archive (the format of OpenAI's released ViT-B-32.pt)
    archive = str(tmp_path / 'scripted.pt')
    torch.jit.save(torch.jit.script(enc.model), archive)
    enc3 = build_encoder(dict(type='OpenCLIPEncoder', model_name='mmsgg-tiny-test', pretrained=archive))
    assert torch.allclose(enc3.encode_image(images), img_a, atol=1e-6)
    s = enc.similarity_to_score(torch.tensor([-0.5, 0.25]))
    assert s.tolist() == [0.0, 0.25]


def test_openclip_refuses_downloads(openclip_dir):
    with pytest.raises(FileNotFoundError, match='local file'):
        build_encoder(dict(type='OpenCLIPEncoder', model_name='ViT-B-32-quickgelu', pretrained='openai'))
    with pytest.raises(ValueError, match='local files only'):
        build_encoder(dict(type='OpenCLIPEncoder', model_name='hf-hub:timm/ViT-B-32'))
    with pytest.raises(ValueError, match='random_init'):
        build_encoder(dict(type='OpenCLIPEncoder', model_name='ViT-B-32-quickgelu'))


# ------------------------------------------------------------------------------------------------ transformers
def test_hf_encoders_load_and_score(hf_dir):
    kind, path = hf_dir
    enc = build_encoder(dict(type=hf_type(kind), model_path=path))
    assert enc.score == ('cosine' if kind == 'clip' else 'sigmoid')
    expected_mode = 'shortest' if kind == 'clip' else 'squash'
    assert enc.preprocess.resize_mode == expected_mode and enc.preprocess.output_size == (224, 224)
    images = torch.rand(2, 3, 100, 150)
    texts = ['man riding horse', 'dog near car', 'a photo of a unknownword']
    img, txt = enc.encode_image(images), enc.encode_text(texts)
    assert img.shape == (2, 16 if kind == 'clip' else 32) and txt.shape == (3, img.shape[1])
    assert torch.equal(img, enc.encode_image(images)) and torch.equal(txt, enc.encode_text(texts))
    cos = torch.nn.functional.normalize(img, dim=-1) @ torch.nn.functional.normalize(txt, dim=-1).T
    if kind == 'siglip':
        # s is exactly the model's own sigmoid probability on the same inputs
        tokens = enc.tokenizer(texts, padding='max_length', truncation=True, max_length=enc.max_length,
                               return_tensors='pt')
        with torch.no_grad():
            out = enc.model(input_ids=tokens['input_ids'], attention_mask=tokens['attention_mask'],
                            pixel_values=enc.preprocess(images))
        assert torch.allclose(enc.similarity_to_score(cos), torch.sigmoid(out.logits_per_image), atol=1e-5)
    else:
        assert torch.equal(enc.similarity_to_score(cos), cos.clamp(min=0))


def test_hf_refuses_hub_ids():
    pytest.importorskip('transformers')
    with pytest.raises(FileNotFoundError, match='not a local directory'):
        build_encoder(dict(type='HFSigLIPEncoder', model_path='google/siglip-base-patch16-224'))


# ------------------------------------------------------------------------------------------------ cropping
def _pil_reference(image, boxes, transform):
    from PIL import Image
    pil = Image.fromarray(image.permute(1, 2, 0).numpy())
    return torch.stack([transform(pil.crop(tuple(int(v) for v in b))) for b in boxes.tolist()])


BOXES = torch.tensor([[10, 20, 200, 120], [0, 0, 320, 240], [100, 50, 130, 230], [300, 200, 320, 240],
                      [50, 60, 70, 76], [5, 5, 300, 30]], dtype=torch.float32)


def _check_crops(crops, reference, preprocess):
    mean = torch.tensor(preprocess.mean)[:, None, None]
    std = torch.tensor(preprocess.std)[:, None, None]
    diff = (crops - (reference * std + mean)).abs()  # back to [0, 1] pixel units
    assert diff.mean(dim=(1, 2, 3)).max() <= CROP_MEAN_TOL, diff.mean(dim=(1, 2, 3))
    assert diff.max() <= CROP_MAX_TOL, diff.amax(dim=(1, 2, 3))


def test_batched_crop_matches_pil_openclip(openclip_dir):
    from open_clip.transform import PreprocessCfg, image_transform_v2
    enc = build_encoder(dict(type='OpenCLIPEncoder', model_name=f'local-dir:{openclip_dir}'))
    images = [smooth_image(240, 320, 0), smooth_image(180, 200, 1)]
    index = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1])
    boxes = torch.cat([BOXES, torch.tensor([[0, 0, 200, 180], [150, 100, 200, 180.]])])
    crops = crop_regions(images, index, boxes, enc.preprocess)
    assert crops.shape == (8, 3, 224, 224)
    transform = image_transform_v2(PreprocessCfg(**enc.model.visual.preprocess_cfg), is_train=False)
    reference = torch.cat([_pil_reference(images[0], BOXES, transform),
                           _pil_reference(images[1], boxes[6:], transform)])
    _check_crops(crops, reference, enc.preprocess)
    # and the resulting embeddings agree closely with the model's own pipeline
    emb = torch.nn.functional.normalize(enc.encode_image(crops), dim=-1)
    with torch.no_grad():
        ref = torch.nn.functional.normalize(enc.model.encode_image(reference), dim=-1)
    assert (emb * ref).sum(-1).min() > 0.99


def test_batched_crop_matches_pil_hf(hf_dir):
    import transformers
    kind, path = hf_dir
    enc = build_encoder(dict(type=hf_type(kind), model_path=path))
    pil_processor = transformers.AutoImageProcessor.from_pretrained(path, local_files_only=True, backend='pil')
    image = smooth_image(240, 320, 2)
    crops = crop_regions([image], torch.zeros(len(BOXES), dtype=torch.long), BOXES, enc.preprocess)
    reference = _pil_reference(image, BOXES,
                               lambda im: pil_processor(images=im, return_tensors='pt')['pixel_values'][0])
    _check_crops(crops, reference, enc.preprocess)


def test_crop_regions_geometry():
    pre = ImagePreprocess('shortest', 4, (4, 4), (0.0,) * 3, (1.0,) * 3)
    # wide box 8x4 -> resized 8x4 -> centre crop keeps x in [2, 6]
    assert pre.regions(torch.tensor([[0., 0., 8., 4.]])).tolist() == [[2.0, 0.0, 6.0, 4.0]]
    squash = ImagePreprocess('squash', (4, 4), None, (0.0,) * 3, (1.0,) * 3)
    assert squash.regions(torch.tensor([[1., 2., 9., 4.]])).tolist() == [[1.0, 2.0, 9.0, 4.0]]
    image = torch.arange(2 * 3 * 16, dtype=torch.float32).reshape(3, 4, 8) / 100
    crops = crop_regions([image], torch.tensor([0]), torch.tensor([[0., 0., 8., 4.]]), pre)
    assert torch.allclose(crops[0], image[:, :, 2:6])
    # boxes outside the image are clipped; degenerate boxes become one pixel
    crops = crop_regions([image], torch.tensor([0, 0]), torch.tensor([[-5., -5., 20., 20.], [3., 1., 3., 1.]]),
                         pre)
    assert torch.allclose(crops[0], image[:, :, 2:6]) and torch.isfinite(crops).all()


# ------------------------------------------------------------------------------------------------ registry
def test_registry_and_missing_dependency(monkeypatch):
    class Stub:
        def encode_image(self, images):
            return images.mean((2, 3))

        def encode_text(self, texts):
            return torch.ones(len(texts), 3)

    stub = Stub()
    assert build_encoder(stub) is stub
    with pytest.raises(KeyError, match='unknown encoder type'):
        build_encoder(dict(type='NoSuchEncoder'))
    with pytest.raises(TypeError):
        build_encoder(42)
    assert {'OpenCLIPEncoder', 'HFCLIPEncoder', 'HFSigLIPEncoder'} <= set(ENCODERS.module_dict)
    monkeypatch.setitem(sys.modules, 'open_clip', None)
    monkeypatch.setitem(sys.modules, 'transformers', None)
    with pytest.raises(ImportError, match=r'mmsgg_eval\[clip\]'):
        build_encoder(dict(type='OpenCLIPEncoder', pretrained='x'))
    with pytest.raises(ImportError, match=r'mmsgg_eval\[hf\]'):
        build_encoder(dict(type='HFSigLIPEncoder', model_path='x'))


def test_build_under_mmdet_scope_is_silent(openclip_dir, capsys):
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmdet'):
        enc = build_encoder(dict(type='OpenCLIPEncoder', model_name=f'local-dir:{openclip_dir}'))
    assert enc.preprocess.output_size == (224, 224)
    assert 'WARNING' not in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------ BLIP-2 ITM
def test_blip2_itm_encoder_matches_the_models_own_head(tmp_path):
    pytest.importorskip('transformers')
    path = make_blip2_dir(str(tmp_path / 'blip2'))
    enc = build_encoder(dict(type='BLIP2ITMEncoder', model_path=path))
    assert is_encoder(enc) and enc.preprocess.resize_mode == 'squash' and enc.preprocess.output_size == (224, 224)
    images = torch.rand(3, 3, 100, 150)
    texts = ['man riding horse', 'dog near car', 'a photo of a wheel on a street']
    features = enc.encode_image(images)
    s = enc.pair_scores(features, texts)
    # the transformers forward of the same (image, text) pairs with its image-text-matching head
    tokens = enc.tokenizer(texts, padding=True, return_tensors='pt')
    with torch.no_grad():
        out = enc.model(pixel_values=enc.preprocess(images), input_ids=tokens['input_ids'],
                        attention_mask=tokens['attention_mask'], use_image_text_matching_head=True)
    match = torch.softmax(out.logits_per_image, dim=-1)[:, 1]  # class 1 = "match" (one softmax)
    assert s.shape == (3,) and torch.allclose(s, match, atol=1e-5)
    assert not torch.allclose(s, 1 - match, atol=1e-3)  # the no-match class would be a different score
    # per-pair scores do not depend on the batch they are computed in
    assert torch.allclose(enc.pair_scores(features[1:2], texts[1:2]), s[1:2], atol=1e-5)
    # text embedding: the Q-Former's projected [CLS] feature (the ITC text embedding of the same model)
    with torch.no_grad():
        itc = enc.model(pixel_values=enc.preprocess(images), input_ids=tokens['input_ids'],
                        attention_mask=tokens['attention_mask'], use_image_text_matching_head=False)
    assert torch.allclose(torch.nn.functional.normalize(enc.encode_text(texts), dim=-1), itc.text_embeds,
                          atol=1e-5)


def test_blip2_refuses_hub_ids_and_text_free_qformer(tmp_path):
    transformers = pytest.importorskip('transformers')
    with pytest.raises(FileNotFoundError, match='not a local directory'):
        build_encoder(dict(type='BLIP2ITMEncoder', model_path='Salesforce/blip2-itm-vit-g'))
    path = make_blip2_dir(str(tmp_path / 'blip2'))
    config = transformers.Blip2Config.from_pretrained(path)
    config.qformer_config.use_qformer_text_input = False
    config.save_pretrained(path)
    with pytest.raises(ValueError, match='use_qformer_text_input'):
        build_encoder(dict(type='BLIP2ITMEncoder', model_path=path))


def test_relation_scorer_joint_and_dual_paths():
    from mmsgg_eval.encoders import RelationScorer

    class Dual:
        def encode_image(self, images):  # black crop -> [3, 4], white crop -> [1, 0]
            return torch.tensor([[1.0, 0.0] if float(x.mean()) > 0.5 else [3.0, 4.0] for x in images])

        def encode_text(self, texts):
            return torch.tensor([[1.0, 0.0] if t == 'a' else [0.0, -2.0] for t in texts])

    class Joint(Dual):
        def pair_scores(self, features, texts):
            return features[:, 0] * torch.tensor([1.0 if t == 'a' else 0.5 for t in texts])

    crops = torch.stack([torch.zeros(3, 4, 4), torch.ones(3, 4, 4)])
    dual = RelationScorer(Dual(), batch_size=1)
    feats = dual.image_features(crops)
    assert torch.allclose(feats.norm(dim=1), torch.ones(2))  # normalised for dual encoders
    assert dual.scores(feats, torch.tensor([0, 0, 1]), ['a', 'b', 'a']).tolist() == pytest.approx([0.6, 0.0, 1.0])
    joint = RelationScorer(Joint(), batch_size=2)
    feats = joint.image_features(crops)
    assert feats[0].tolist() == [3.0, 4.0]  # raw for joint scorers
    assert joint.scores(feats, torch.tensor([0, 1, 0]), ['a', 'b', 'b']).tolist() == [3.0, 0.5, 1.5]


def test_package_exports_and_registry_names_are_kept():
    """configs name the encoders by their registry names; every public name stays importable from the package."""
    import mmsgg_eval.encoders as encoders
    assert set(ENCODERS.module_dict) >= {'OpenCLIPEncoder', 'HFCLIPEncoder', 'HFSigLIPEncoder', 'BLIP2ITMEncoder'}
    for name in encoders.__all__:
        assert getattr(encoders, name) is not None, name
    for name in ('OpenCLIPEncoder', 'HFCLIPEncoder', 'HFSigLIPEncoder', 'BLIP2ITMEncoder'):
        assert ENCODERS.get(name) is getattr(encoders, name)
    assert encoders.DEFAULT_PREPROCESS == ImagePreprocess()
