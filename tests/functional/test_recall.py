"""functional/recall.py: R@K and the per-predicate recall of several rank columns in one pass
(:func:`recalls_from_ranks`, :func:`per_predicate_recalls`) against loop references written from the
definitions, and bit for bit against the one-column formula (the dense [images, predicates] table summed over the
images for each K, up to 2,500 images: several levels of the summation), whose summation order the reported numbers
depend on."""
import math
import random

import pytest
import torch

from mmsgg_eval.functional import compiled
from mmsgg_eval.functional.limits import NO_HIT
from mmsgg_eval.functional.recall import (evaluated_image_rows, hits_per_k_columns, per_predicate_recall,
                                          per_predicate_recalls, recall_from_ranks, recalls_from_ranks)


def per_predicate_layout(rank, predicate, image, num_images, num_predicates, ks, average):
    """The one-column formula as the metrics computed it (dense float64 tables, one per K)."""
    key = image * num_predicates + predicate
    size = num_images * num_predicates
    count = torch.bincount(key, minlength=size).double().view(num_images, num_predicates)
    n_img = (count > 0).sum(0).double()
    present = n_img > 0
    rows = []
    for k in ks:
        hits = torch.bincount(key[rank < min(k, NO_HIT)], minlength=size).double().view(num_images, num_predicates)
        if average == 'micro':
            rows.append(torch.where(present, hits.sum(0) / count.sum(0).clamp(min=1), torch.zeros_like(hits[0])))
        else:
            ratio = hits / count.clamp(min=1)
            rows.append(torch.where(present, ratio.sum(0) / n_img.clamp(min=1), torch.zeros_like(n_img)))
    return (torch.stack(rows) if rows else torch.zeros((0, num_predicates), dtype=torch.float64)), present


def per_predicate_loop(rank, predicate, image, num_predicates, k, average):
    """Per predicate: the mean over the images holding it of hits / relations ('image'), or hits / relations
    ('micro'); 0 for an absent predicate."""
    cells = {}
    for r, p, i in zip(rank.tolist(), predicate.tolist(), image.tolist()):
        cell = cells.setdefault((p, i), [0, 0])
        cell[0] += r < min(k, NO_HIT)
        cell[1] += 1
    out = []
    for p in range(num_predicates):
        mine = [v for (q, _), v in cells.items() if q == p]
        if not mine:
            out.append(0.0)
        elif average == 'image':
            out.append(sum(h / c for h, c in mine) / len(mine))
        else:
            out.append(sum(h for h, _ in mine) / sum(c for _, c in mine))
    return out


def random_case(rng, num_images, num_predicates):
    g = rng.randint(1, 6 * num_images)
    image = torch.randint(0, num_images, (g,))
    predicate = torch.randint(0, num_predicates, (g,))
    columns = [(torch.randint(0, rng.choice([5, 120, 2 * NO_HIT]), (g,)).clamp(max=NO_HIT),
                rng.choice([(20, 50, 100), (1,), (), (3, 10 ** 6), (100, 20, 20)]))
               for _ in range(rng.randint(1, 4))]
    return image, predicate, columns


@pytest.mark.parametrize('average', ['image', 'micro'])
def test_per_predicate_recalls_bit_equal_to_the_one_column_formula(average):
    rng = random.Random(7)
    torch.manual_seed(7)
    for _ in range(60):
        num_images, num_predicates = rng.choice([1, 3, 40, 700, 2500]), rng.choice([1, 7, 51])
        image, predicate, columns = random_case(rng, num_images, num_predicates)
        tables, present = per_predicate_recalls(columns, predicate, image, num_images, num_predicates, average)
        assert len(tables) == len(columns)
        for (rank, ks), table in zip(columns, tables):
            want, want_present = per_predicate_layout(rank, predicate, image, num_images, num_predicates, ks, average)
            assert torch.equal(present, want_present)
            assert table.dtype == torch.float64 and table.shape == want.shape
            assert torch.equal(table.view(torch.int64), want.view(torch.int64))  # bit for bit
            single, _ = per_predicate_recall(rank, predicate, image, num_images, num_predicates, ks, average)
            assert torch.equal(single.view(torch.int64), want.view(torch.int64))


@pytest.mark.skipif(not compiled.built(), reason='the compiled kernels are not built')
def test_per_predicate_recalls_compiled_equal_the_torch_path_bit_for_bit():
    """The compiled cell counts (CPU, 'image') against the torch path: rank columns of int16 / int32 / int64,
    columns without K beside others, no relation at all, images and predicates without relations, K above
    ``NO_HIT``, one image or one predicate."""
    rng = random.Random(19)
    torch.manual_seed(19)
    for case in range(80):
        num_images, num_predicates = rng.choice([1, 2, 60, 2500]), rng.choice([1, 5, 51])
        image, predicate, columns = random_case(rng, num_images, num_predicates)
        columns = [(rank.to(rng.choice([torch.int16, torch.int32, torch.int64])) if rank.max() < 2 ** 15 else rank,
                    ks) for rank, ks in columns]
        if case % 10 == 0:  # no relation at all
            image, predicate, columns = image[:0], predicate[:0], [(rank[:0], ks) for rank, ks in columns]
        got, got_present = per_predicate_recalls(columns, predicate, image, num_images, num_predicates)
        with compiled.disabled():
            want, want_present = per_predicate_recalls(columns, predicate, image, num_images, num_predicates)
        assert torch.equal(got_present, want_present)
        for a, b in zip(got, want):
            assert a.dtype == b.dtype == torch.float64 and a.shape == b.shape
            assert torch.equal(a.view(torch.int64), b.view(torch.int64))


@pytest.mark.skipif(not compiled.built(), reason='the compiled kernels are not built')
def test_hits_per_k_columns_compiled_equal_the_bincounts():
    """The compiled hit counts against one bincount per K (and the torch path): rank dtypes, no relation, keys
    never used, K above ``NO_HIT``, no K; a key outside [0, size) is an error, not a miscount."""
    rng = random.Random(23)
    torch.manual_seed(23)
    for case in range(60):
        size = rng.choice([1, 3, 200, 5000])
        image, _, columns = random_case(rng, size, 1)
        for rank, ks in columns:
            if rank.max() < 2 ** 15:
                rank = rank.to(rng.choice([torch.int16, torch.int32, torch.int64]))
            key = image[:0] if case % 10 == 0 else image
            rank = rank[:key.numel()]
            got = hits_per_k_columns(rank, key, size, ks)
            want = [torch.bincount(key[rank.long() < min(k, NO_HIT)], minlength=size).double() for k in ks]
            with compiled.disabled():
                torch_path = hits_per_k_columns(rank, key, size, ks)
            assert len(got) == len(want) == len(torch_path)
            for a, b, c in zip(got, want, torch_path):
                assert a.dtype == torch.float64 and torch.equal(a, b) and torch.equal(a, c)
    with pytest.raises(RuntimeError, match='outside'):
        hits_per_k_columns(torch.zeros(2, dtype=torch.int32), torch.tensor([0, 3]), 3, [1])


@pytest.mark.parametrize('average', ['image', 'micro'])
def test_per_predicate_recalls_against_the_loop_reference(average):
    rng = random.Random(11)
    torch.manual_seed(11)
    for _ in range(25):
        num_images, num_predicates = rng.choice([1, 4, 30]), rng.choice([2, 9])
        image, predicate, columns = random_case(rng, num_images, num_predicates)
        tables, present = per_predicate_recalls(columns, predicate, image, num_images, num_predicates, average)
        assert present.tolist() == [bool((predicate == p).any()) for p in range(num_predicates)]
        for (rank, ks), table in zip(columns, tables):
            for j, k in enumerate(ks):
                want = per_predicate_loop(rank, predicate, image, num_predicates, k, average)
                assert all(math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15) for a, b in zip(table[j].tolist(), want))


@pytest.mark.parametrize('average,empty', [('image', 0.0), ('micro', 0.0), ('image', float('nan'))])
def test_recalls_from_ranks_equal_each_column_alone_and_the_loop(average, empty):
    rng = random.Random(3)
    torch.manual_seed(3)
    for _ in range(40):
        num_images = rng.choice([1, 5, 300])
        image, _, columns = random_case(rng, num_images, 1)
        if rng.random() < 0.2:  # no relation at all: the empty value
            image, columns = image[:0], [(rank[:0], ks) for rank, ks in columns]
        got = recalls_from_ranks(columns, image, num_images, average, empty)
        for (rank, ks), values in zip(columns, got):
            alone = recall_from_ranks(rank, image, num_images, ks, average=average, empty=empty)
            assert torch.equal(values, alone) or (values.isnan().all() and alone.isnan().all())
            for j, k in enumerate(ks):
                hit = (rank < min(k, NO_HIT)).tolist()
                per_image = {}
                for i, h in zip(image.tolist(), hit):
                    per_image.setdefault(i, []).append(h)
                if not per_image:
                    want = empty
                elif average == 'image':
                    want = sum(sum(v) / len(v) for v in per_image.values()) / len(per_image)
                else:
                    want = sum(hit) / len(hit)
                assert (math.isnan(want) and math.isnan(float(values[j]))) or math.isclose(float(values[j]), want,
                                                                                          rel_tol=1e-12)


def test_evaluated_image_rows_against_the_definition():
    """Each relation row of an evaluated image is kept and numbered by its image's position among the evaluated
    images; rows of other images (not evaluated, or absent from the images) are dropped. Sample indices dense
    (the lookup table over their range), sparse or huge (a sort), negative, and relations outside their range."""
    rng = random.Random(29)
    torch.manual_seed(29)
    for case in range(60):
        count = rng.choice([1, 3, 40, 500])
        spread = rng.choice([1, 3, 10 ** 6, 2 ** 52])
        sample_idx = torch.tensor(sorted({rng.randrange(-5, count * spread) for _ in range(count)}), dtype=torch.int64)
        sample_idx, count = sample_idx[torch.randperm(sample_idx.numel())], sample_idx.numel()
        evaluated = torch.rand(count) < rng.choice([0.0, 0.5, 1.0])
        extra = torch.randint(-10, 10, (rng.randint(0, 20),)) + (sample_idx.max() if case % 2 else 0)
        rel = torch.cat([sample_idx[torch.randint(0, count, (rng.randint(0, 6 * count),))], extra])
        rel = rel[torch.randperm(rel.numel())]
        image_of, keep, num = evaluated_image_rows(sample_idx, evaluated, rel)
        position = {int(i): n for n, i in enumerate(sample_idx[evaluated].tolist())}
        assert num == len(position)
        assert keep.tolist() == [int(r) in position for r in rel.tolist()]
        assert image_of.tolist() == [position[int(r)] for r in rel.tolist() if int(r) in position]
