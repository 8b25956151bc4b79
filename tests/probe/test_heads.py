"""The probe-head registry: names, results naming, options, and a duplicate refused."""

import pytest

from crs.foundations.errors import BadInput, UserError
from crs.probe import heads
from crs.probe.run import HEADS, head_name


def test_every_registered_head_is_listed_and_named():
    assert HEADS == tuple(heads.REGISTRY) and HEADS[:2] == ("linear", "mlp")
    assert head_name("dinov2-s", "linear") == "dinov2-s"
    for name in HEADS[1:]:
        assert head_name("dinov2-s", name) == f"dinov2-s+{name}"


def test_unknown_head_is_a_user_error_naming_the_choices():
    with pytest.raises(BadInput, match="linear, mlp") as err:
        head_name("dinov2-s", "svm")
    assert isinstance(err.value, UserError) and isinstance(err.value, ValueError)


def test_a_duplicate_name_is_refused_and_the_first_kept():
    first = heads.REGISTRY["linear"]
    with pytest.raises(ValueError, match="already registered"):
        heads.register(heads.Head("linear", lambda data, **kw: None))
    assert heads.REGISTRY["linear"] is first


def test_a_name_that_could_collide_with_an_encoder_is_refused():
    for bad in ("mlp+2", "MLP"):
        with pytest.raises(ValueError, match="lowercase"):
            heads.register(heads.Head(bad, lambda data, **kw: None))
        assert bad not in heads.REGISTRY


def test_options_are_checked_and_recorded():
    mlp = heads.get("mlp")
    given = {"max_iter": 10, "tol": 1e-4, "gap": None, "hidden": 16, "mlp_settings": None}
    options = mlp.checked(given)
    assert options == {"hidden": 16, "mlp_settings": None}
    assert mlp.attrs("enc", options) == {"head": "mlp", "hidden": 16, "embeddings_of": "enc"}
    assert heads.get("linear").attrs("enc", heads.get("linear").checked(given)) == {}
    for bad in (0, 2.5, "8"):
        with pytest.raises(BadInput, match="hidden"):
            mlp.checked({**given, "hidden": bad})


def test_the_registered_heads_are_the_heads_the_settings_accept():
    from crs.foundations.names import HEADS as SETTINGS_HEADS

    assert tuple(heads.REGISTRY) == SETTINGS_HEADS
