"""Image decoding of the encoders: every image mode PIL / torchvision decode (16-bit, 32-bit, float, palette with
and without transparency, gray, gray + alpha, CMYK, RGBA, 1-bit, 16-bit RGB(A) PNG) reads as the 8-bit RGB version
of the picture (16-bit sample v -> v >> 8), through the file decoder, the crops and the whole RelCLIPScore.
"""
import io
import struct
import zlib
from typing import Dict, Tuple

import numpy as np
import pytest
import torch
from PIL import Image

from mmsgg_eval.encoders import images as encoder_images  # holds the once-per-process range warning flag
from mmsgg_eval.encoders import ImagePreprocess, crop_regions, decode_image, to_rgb_float, to_rgb_uint8
from tests.metrics.test_relclip import H, M, RIDING, S, ON, make_sample, run_metric

HEIGHT, WIDTH = 24, 32
PRE = ImagePreprocess('shortest', 8, (8, 8), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
BOXES = torch.tensor([[0., 0., 32., 24.], [3., 2., 17., 20.], [10.5, 4.25, 30., 9.75], [20., 12., 21., 13.]])


def base_rgb() -> np.ndarray:
    """The 8-bit RGB picture every mode is built from: smooth ramps plus noise, all 256 levels used."""
    rng = np.random.default_rng(26)
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH]
    ramps = np.stack([x * 255 / (WIDTH - 1), y * 255 / (HEIGHT - 1), (x + y) * 255 / (WIDTH + HEIGHT - 2)], -1)
    return np.clip(ramps + rng.integers(-40, 41, ramps.shape), 0, 255).astype(np.uint8)


def png16(samples: np.ndarray) -> bytes:
    """A 16-bit PNG (gray, gray + alpha, RGB or RGBA by the channel count) of uint16 samples [H, W(, C)];
    PIL cannot write 16-bit colour PNGs."""
    arr = np.asarray(samples, dtype='>u2')
    arr = arr[..., None] if arr.ndim == 2 else arr
    h, w, c = arr.shape
    raw = b''.join(b'\x00' + arr[row].tobytes() for row in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data) & 0xffffffff)

    header = struct.pack('>IIBBBBB', w, h, 16, {1: 0, 2: 4, 3: 2, 4: 6}[c], 0, 0, 0)
    return b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', header) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b'')


def widen(v8: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """16-bit samples whose high byte is ``v8`` and whose low byte is noise: their 8-bit version is exactly
    ``v8`` under the documented rule v >> 8 (round(v / 257) would differ by one level for about half)."""
    return (v8.astype(np.uint16) << 8) | rng.integers(0, 256, v8.shape).astype(np.uint16)


def gray3(gray: np.ndarray) -> np.ndarray:
    return np.repeat(gray[..., None], 3, -1)


@pytest.fixture(scope='module')
def pictures(tmp_path_factory) -> Dict[str, Tuple[str, np.ndarray]]:
    """name -> (file, its 8-bit RGB version [H, W, 3] uint8), one file per mode / format."""
    tmp = tmp_path_factory.mktemp('modes')
    rgb = base_rgb()
    base = Image.fromarray(rgb)
    gray_img = base.convert('L')
    gray = np.asarray(gray_img)
    rng = np.random.default_rng(6)
    alpha = Image.fromarray(rng.integers(0, 256, gray.shape).astype(np.uint8))
    palette = base.quantize(colors=48)
    out: Dict[str, Tuple[str, np.ndarray]] = {}

    def save(name: str, img: Image.Image, expected: np.ndarray, **kwargs) -> None:
        path = str(tmp / name)
        img.save(path, **kwargs)
        out[name] = (path, expected)

    def write(name: str, data: bytes, expected: np.ndarray) -> None:
        path = str(tmp / name)
        with open(path, 'wb') as f:
            f.write(data)
        out[name] = (path, expected)

    save('RGB.png', base, rgb)
    save('L.png', gray_img, gray3(gray))
    save('LA.png', Image.merge('LA', (gray_img, alpha)), gray3(gray))  # alpha dropped, not composited
    save('RGBA.png', Image.merge('RGBA', (*base.split(), alpha)), rgb)
    save('P.png', palette, np.asarray(palette.convert('RGB')))  # the palette colours
    save('P-transparency.png', palette, np.asarray(palette.convert('RGB')), transparency=0)
    save('P.gif', palette, np.asarray(palette.convert('RGB')))
    one = gray_img.convert('1')
    save('1.png', one, gray3(np.asarray(one).astype(np.uint8) * 255))
    save('1.bmp', one, gray3(np.asarray(one).astype(np.uint8) * 255))
    save('CMYK.tif', base.convert('CMYK'), rgb)  # K = 0: PIL's CMYK -> RGB gives the picture back exactly
    save('L.tif', gray_img, gray3(gray))
    save('RGB.bmp', base, rgb)
    save('RGB.webp', base, rgb, lossless=True)
    i16 = widen(gray, rng)
    save('I;16.png', Image.fromarray(i16), gray3(gray))
    save('I;16.tif', Image.fromarray(i16), gray3(gray))
    save('I.tif', Image.fromarray(i16.astype(np.int32)), gray3(gray))  # 32-bit integer samples, 16-bit scale
    save('F.tif', Image.fromarray(gray.astype(np.float32) / 255), gray3(gray))  # float samples on [0, 1]
    write('RGB16.png', png16(widen(rgb, rng)), rgb)
    write('RGBA16.png', png16(np.concatenate([widen(rgb, rng), widen(np.asarray(alpha)[..., None], rng)], -1)),
          rgb)
    write('LA16.png', png16(np.stack([widen(gray, rng), widen(np.asarray(alpha), rng)], -1)), gray3(gray))
    # a CMYK JPEG: lossy, so its 8-bit RGB version is PIL's reading of the same file
    cmyk_jpg = str(tmp / 'CMYK.jpg')
    base.convert('CMYK').save(cmyk_jpg, quality=95)
    with Image.open(cmyk_jpg) as img:
        assert img.mode == 'CMYK'
        out['CMYK.jpg'] = (cmyk_jpg, np.asarray(img.convert('RGB')))
    for name, (path, _) in out.items():  # the files are what their names say
        if name.endswith(('16.png',)) or name == 'CMYK.jpg':
            continue
        with Image.open(path) as img:
            assert img.mode == name.split('.')[0].split('-')[0] or name.endswith(('.gif', '.webp')), (name, img.mode)
    return out


MODES = ['RGB.png', 'L.png', 'LA.png', 'RGBA.png', 'P.png', 'P-transparency.png', 'P.gif', '1.png', '1.bmp',
         'CMYK.tif', 'CMYK.jpg', 'L.tif', 'RGB.bmp', 'RGB.webp', 'I;16.png', 'I;16.tif', 'I.tif', 'F.tif',
         'RGB16.png', 'RGBA16.png', 'LA16.png']


@pytest.fixture(params=['torchvision', 'pil'])
def decoder(request, monkeypatch):
    """Each file once through torchvision (where it reads the format) and once through the PIL fallback."""
    if request.param == 'pil':
        import torchvision.io

        def refuse(*args, **kwargs):
            raise RuntimeError('torchvision decoding disabled by the test')

        monkeypatch.setattr(torchvision.io, 'decode_image', refuse)
    return request.param


def crops_of(image: torch.Tensor) -> torch.Tensor:
    return crop_regions([image], torch.zeros(len(BOXES), dtype=torch.long), BOXES, PRE)


@pytest.mark.parametrize('name', MODES)
def test_every_mode_reads_as_its_8bit_rgb_version(pictures, decoder, name):
    path, expected = pictures[name]
    image = decode_image(path)
    want = torch.from_numpy(np.array(expected)).permute(2, 0, 1)
    assert image.dtype == torch.uint8 and tuple(image.shape) == (3, HEIGHT, WIDTH)
    tol = 1 if name == 'CMYK.jpg' else 0  # libjpeg colour conversion may round differently from PIL's
    assert (image.int() - want.int()).abs().max() <= tol, name
    # the crop path sees the same pixels as from the 8-bit RGB picture
    assert (crops_of(image) - crops_of(want)).abs().max() <= tol / 255 + 1e-6, name


def test_16bit_png_reads_the_same_through_torchvision_and_pil(pictures, monkeypatch):
    import torchvision.io
    names = ['I;16.png', 'RGB16.png', 'RGBA16.png', 'LA16.png']
    via_torchvision = {name: decode_image(pictures[name][0]) for name in names}
    monkeypatch.setattr(torchvision.io, 'decode_image', lambda *a, **k: (_ for _ in ()).throw(RuntimeError()))
    for name in names:
        assert torch.equal(decode_image(pictures[name][0]), via_torchvision[name]), name


# ------------------------------------------------------------------------------------------- image tensors
def test_tensors_of_every_sample_type_crop_as_their_8bit_version():
    rgb = torch.from_numpy(base_rgb()).permute(2, 0, 1).contiguous()
    ref = crops_of(rgb)
    noise = torch.randint(0, 256, rgb.shape, generator=torch.Generator().manual_seed(0))
    wide = (rgb.int() << 8) | noise.int()  # high byte = the 8-bit picture
    cases = {
        'uint16': wide.to(torch.uint16),
        'int32': wide,
        'int64': wide.long(),
        'float64 in [0, 1]': rgb.double() / 255,
        'RGBA uint8': torch.cat([rgb, torch.zeros_like(rgb[:1])]),
    }
    for name, image in cases.items():
        assert (crops_of(image) - ref).abs().max() <= 1e-5, name
    gray = rgb[:1]
    assert torch.allclose(crops_of(gray), crops_of(gray.expand(3, -1, -1)))  # gray: repeated
    assert torch.allclose(crops_of(torch.stack([gray[0], gray[0] // 2])), crops_of(gray.expand(3, -1, -1)))
    mask = rgb > 127
    assert torch.equal(crops_of(mask), crops_of(mask.to(torch.uint8) * 255))
    # the encoders' own preprocessing (encode_image) converts the same way
    batch = wide.to(torch.uint16)[None]
    assert torch.allclose(PRE(batch), PRE(rgb[None]))
    assert torch.equal(to_rgb_uint8(wide), rgb) and torch.equal(to_rgb_float(wide), rgb.float() / 255)
    with pytest.raises(ValueError, match='channels'):
        crops_of(torch.zeros(5, HEIGHT, WIDTH, dtype=torch.uint8))


def test_out_of_scale_samples_are_clipped_with_a_warning(tmp_path, monkeypatch):
    gray = np.asarray(Image.fromarray(base_rgb()).convert('L'))
    monkeypatch.setattr(encoder_images, '_WARNED_RANGE', [False])
    path = str(tmp_path / 'F255.tif')  # PIL's own 0-255 scale for 'F': documented to read on [0, 1]
    Image.fromarray(gray.astype(np.float32)).save(path)
    with pytest.warns(UserWarning, match=r'outside \[0, 1\]'):
        image = decode_image(path)
    assert torch.equal(image, torch.from_numpy(gray3(np.where(gray > 0, 255, 0).astype(np.uint8))).permute(2, 0, 1))
    monkeypatch.setattr(encoder_images, '_WARNED_RANGE', [False])
    path = str(tmp_path / 'I255.tif')  # 8-bit data in a 32-bit container reads black: said so
    Image.fromarray(gray.astype(np.int32)).save(path)
    with pytest.warns(UserWarning, match='16-bit scale'):
        assert int(decode_image(path).max()) == 0


# ------------------------------------------------------------------------------------------- RelCLIPScore
class ContentEncoder:
    """Deterministic fake encoder whose image embedding depends on the crop's pixels (mean and spread of each
    channel) and whose text embedding is a fixed pseudo-random vector per text."""
    preprocess = PRE

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        assert images.dtype == torch.float32 and 0 <= float(images.min()) and float(images.max()) <= 1
        centred = images - 0.5
        return torch.cat([centred.mean((2, 3)), centred.std((2, 3)), torch.full((images.shape[0], 1), 0.1)], 1)

    def encode_text(self, texts):
        return torch.stack([torch.randn(7, generator=torch.Generator().manual_seed(zlib.crc32(t.encode())))
                            for t in texts])


def relclip_scores(path: str) -> Dict[str, float]:
    boxes = [[0., 0., 12., 10.], [8., 6., 30., 22.], [2., 14., 16., 24.]]
    rels = [(0, 1, RIDING, 0.9), (1, 2, ON, 0.8), (2, 0, ON, 0.7), (0, 2, RIDING, 0.6)]
    samples = [make_sample(i, path, [M, H, S], rels, gt_boxes=boxes) for i in range(2)]
    for sample in samples:
        sample['ori_shape'] = (HEIGHT, WIDTH)
    return run_metric(samples, encoder=ContentEncoder(), batch=2, region_breakdown=True)


def test_relclipscore_of_a_16bit_png_equals_the_8bit_png(pictures, tmp_path):
    eight = relclip_scores(pictures['RGB.png'][0])
    assert eight['CLIPScore'] > 0
    for name in ('RGB16.png', 'RGBA16.png', 'RGBA.png', 'CMYK.tif', 'RGB.webp'):
        assert relclip_scores(pictures[name][0]) == pytest.approx(eight, abs=1e-9, nan_ok=True), name
    gray = relclip_scores(pictures['L.png'][0])
    for name in ('I;16.png', 'I.tif', 'F.tif', 'LA16.png'):
        assert relclip_scores(pictures[name][0]) == pytest.approx(gray, abs=1e-9, nan_ok=True), name
    # the fake encoder tells pictures apart: a white picture (what unscaled 16-bit samples clamp to) differs
    white = str(tmp_path / 'white.png')
    Image.fromarray(np.full((HEIGHT, WIDTH, 3), 255, np.uint8)).save(white)
    assert abs(relclip_scores(white)['CLIPScore'] - eight['CLIPScore']) > 1
