"""extract_many loads the encoders' models in groups (at most max_models, weights within a memory
budget), each group decoding and perturbing once; the store is the same as with every model at once."""

import dataclasses

import numpy as np
import pytest

from crs.extract import cost, encoders
from crs.extract import groups as groupsmod
from crs.extract import run as runmod
from crs.extract.models import load
from crs.extract.options import ExtractOptions
from crs.store import Store


def test_groups_close_at_the_count_or_the_budget_and_unknown_or_huge_models_go_alone():
    g = groupsmod.model_groups
    assert g([1, 1, 1, 1, 1], budget=None, max_models=2) == [[0, 1], [2, 3], [4]]
    assert g([1, 1, 1], budget=None, max_models=None) == [[0, 1, 2]]
    assert g([4, 5, 1, 9, 2], budget=10, max_models=None) == [[0, 1, 2], [3], [4]]
    assert g([4, 5, 1, 9, 2], budget=10, max_models=2) == [[0, 1], [2, 3], [4]]
    assert g([3, None, 3, 30, 3, 3], budget=10, max_models=None) == [[0], [1], [2], [3], [4, 5]]
    assert g([], budget=10, max_models=1) == []
    with pytest.raises(ValueError, match="max_models"):
        g([1], budget=None, max_models=0)


def test_parameters_are_counted_without_weights():
    spec = encoders.get("demo-vit")
    assert cost.parameters(spec) == sum(p.numel() for p in load(spec, "cpu").model.parameters())
    assert cost.parameters(encoders.get("demo-stats")) == 0
    assert cost.parameters(encoders.get("vit-base")) == 85_798_656  # timm vit_base_patch16_224 without its head


def test_a_group_holds_its_weights_and_the_largest_batch_of_activations():
    g = groupsmod.model_groups
    assert g([4, 4], budget=10, max_models=None, activations=[2, 2]) == [[0, 1]]  # 4 + 4 + max(2, 2)
    assert g([4, 4], budget=10, max_models=None, activations=[2, 3]) == [[0], [1]]  # 4 + 4 + 3 > 10
    assert g([4, 7, 1], budget=10, max_models=None, activations=[1, 4, 1]) == [[0], [1], [2]]  # 7 + 4 alone > 10


def test_encoder_groups_use_the_records_float32_sizes_and_one_batch_of_activations():
    specs = {n: encoders.get(n) for n in ("demo-resnet", "demo-vit", "demo-stats")}
    size = {n: 4 * cost.parameters(s) for n, s in specs.items()}
    act = {n: 8 * s.input_size ** 2 * groupsmod.ACTIVATION_BYTES_PER_PIXEL for n, s in specs.items()}
    assert all(groupsmod.model_bytes(s, 8) == (size[n], act[n]) for n, s in specs.items())
    both = size["demo-resnet"] + size["demo-vit"] + max(act["demo-resnet"], act["demo-vit"])
    assert groupsmod.encoder_groups(specs, "cpu", None, batch=8) == [list(specs)]  # the host's memory holds them
    assert groupsmod.encoder_groups(specs, "cpu", None, batch=8, budget=both) == [list(specs)]
    assert groupsmod.encoder_groups(specs, "cpu", None, batch=8, budget=both - 1) == [["demo-resnet"],
                                                                                  ["demo-vit", "demo-stats"]]
    assert groupsmod.encoder_groups(specs, "cpu", 1) == [["demo-resnet"], ["demo-vit"], ["demo-stats"]]


def test_the_pretrained_registry_never_loads_at_once_and_the_log_says_how_many_do(caplog):
    """Tiny random stand-ins of 15 records, a budget of a few of them: never all at once, the log says so;
    the registry's own pretrained records, on a budget as large as an H200's, stop at ``MAX_MODELS``."""
    tiny = encoders.get("demo-vit")
    specs = {f"tiny-{i}": dataclasses.replace(tiny, name=f"tiny-{i}") for i in range(15)}
    weights, act = groupsmod.model_bytes(tiny, 4)
    with caplog.at_level("INFO", logger="crs.extract"):
        groups = groupsmod.encoder_groups(specs, "cpu", None, batch=4, budget=3 * weights + act)
    assert [len(g) for g in groups] == [3] * 5 and sum(groups, []) == list(specs)
    assert "at most 3 models loaded together" in caplog.text
    pretrained = {n: s for n, s in encoders.ENCODERS.items() if s.pretrained and s.source != "builtin"}
    assert len(pretrained) >= 15
    groups = groupsmod.encoder_groups(pretrained, "cuda", None, batch=64, budget=int(0.8 * 139e9))
    assert len(groups) > 1 and max(map(len, groups)) <= groupsmod.MAX_MODELS


def test_one_model_at_a_time_writes_the_store_of_all_at_once(tmp_path, monkeypatch):
    kw = dict(size=0.05, chunk=16, perturbations=False)
    stats = encoders.get("demo-stats")
    names = [stats, dataclasses.replace(stats, name="demo-stats-2")]  # cheap models: the grouping is what is tested
    together = Store(str(tmp_path / "together.zarr"))
    runmod.extract_many(together, names, "demo_fundus", ExtractOptions(**kw))

    groups = []
    locally = runmod._extract_locally

    def spy(store, specs, *args, **kwargs):
        groups.append(list(specs))
        return locally(store, specs, *args, **kwargs)

    monkeypatch.setattr(runmod, "_extract_locally", spy)
    apart = Store(str(tmp_path / "apart.zarr"))
    runs = runmod.extract_many(apart, names, "demo_fundus", ExtractOptions(max_models=1, **kw))
    assert groups == [["demo-stats"], ["demo-stats-2"]]
    assert [r.encoder for r in runs] == ["demo-stats", "demo-stats-2"] and all(r.complete for r in runs)
    assert all(r.decodes == r.images for r in runs)  # each group decoded every image once
    got = {(d, e, c) for d, e, c, _ in apart.embeddings()}
    assert got == {(d, e, c) for d, e, c, _ in together.embeddings()} and got
    for d, e, c in got:
        np.testing.assert_array_equal(apart.read_embedding(d, e, c), together.read_embedding(d, e, c))
