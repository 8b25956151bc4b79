"""Per-modality perturbation suites: the registry, contents, one severity table, determinism, growth with severity."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from crs.cli import app
from crs.extract import perturb, synthetic
from crs.foundations.errors import UserError
from crs.foundations.names import MODALITIES

README = Path(__file__).resolve().parents[2] / "docs" / "datasets-and-encoders.md"  # the page that holds the table

ALL_FAMILIES = sorted({f for fams in perturb.SUITES.values() for f in fams})


def test_suites_hold_the_corruptions_of_each_modality():
    assert set(perturb.SUITES["dermatology"]) == {
        "gaussian_noise", "speckle_noise", "impulse_noise", "shot_noise", "defocus_blur", "motion_blur", "zoom_blur",
        "brightness_up", "brightness_down", "contrast_up", "contrast_down", "jpeg", "pixelate", "dark_corners",
        "ink_marks"}
    assert set(perturb.SUITES["ophthalmology"]) == {
        "pixelate", "jpeg", "gaussian_noise", "speckle_noise", "defocus_blur", "motion_blur", "brightness_down",
        "contrast_down"}
    assert set(perturb.SUITES["radiology"]) == {
        "pixelate", "jpeg", "gaussian_noise", "speckle_noise", "impulse_noise", "shot_noise", "gaussian_blur",
        "brightness_up", "brightness_down", "contrast_up", "contrast_down", "gamma_up", "gamma_down"}
    # one table holds every family's parameters, five severities each
    assert set(ALL_FAMILIES) == set(perturb.SEVERITY)
    assert all(len(values) == 5 for _, values, _ in perturb.SEVERITY.values())


def test_suite_and_table_order_is_pinned():
    """The order of a suite is the order of its conditions in the store and the score tables."""
    assert tuple(perturb.SUITES) == MODALITIES
    assert perturb.SUITES["ophthalmology"] == (
        "pixelate", "jpeg", "gaussian_noise", "speckle_noise", "defocus_blur", "motion_blur", "brightness_down",
        "contrast_down")
    assert perturb.SUITES["radiology"][:4] == ("pixelate", "jpeg", "gaussian_noise", "speckle_noise")
    assert perturb.SUITES["dermatology"][-4:] == ("jpeg", "pixelate", "dark_corners", "ink_marks")
    assert list(perturb.SEVERITY)[:5] == ["gaussian_noise", "speckle_noise", "impulse_noise", "shot_noise",
                                          "gaussian_blur"]
    assert perturb.conditions("ophthalmology", (2, 4))[:3] == ["pixelate@2", "pixelate@4", "jpeg@2"]


def test_every_view_comes_from_the_one_record_of_each_family():
    assert list(perturb.FAMILIES) == list(perturb.SEVERITY)
    for name, f in perturb.FAMILIES.items():
        assert perturb.SEVERITY[name] == (f.parameter, f.values, f.meaning)
        assert {m for m, fams in perturb.SUITES.items() if name in fams} == set(f.suites)
        assert perturb.parameters(name, 2)[f.parameter] == f.values[1]
    with pytest.raises(TypeError):
        perturb.FAMILIES["fog"] = perturb.FAMILIES["jpeg"]  # the registry is read-only once built


def _identity(x, value, seeds):
    return x


def test_the_registry_refuses_a_duplicate_and_malformed_records():
    registry = dict(perturb.FAMILIES)
    with pytest.raises(ValueError, match="'jpeg' is registered twice"):
        perturb.family("jpeg", "quality", (1, 2, 3, 4, 5), "again", ("radiology",), registry=registry)(_identity)
    assert registry["jpeg"] == perturb.FAMILIES["jpeg"]
    perturb.family("fog", "density", (1, 2, 3, 4, 5), "new", ("radiology",), registry=registry)(_identity)
    assert registry["fog"].fn is _identity and "fog" not in perturb.FAMILIES
    with pytest.raises(ValueError, match="'fog' is registered twice"):
        perturb.family("fog", "density", (1, 2, 3, 4, 5), "new", ("radiology",), registry=registry)(_identity)
    with pytest.raises(RuntimeError, match="before its views"):  # SEVERITY and SUITES would not show it
        perturb.family("haze", "p", (1, 2, 3, 4, 5), "m", ("radiology",))(_identity)
    assert "haze" not in perturb.FAMILIES
    bad = [("haze", (1, 2, 3, 4, 5), ("pathology",), "suites"),  # not a modality of crs.foundations.names
           ("haze", (1, 2, 3, 4, 5), (), "suites"),
           ("haze", (1, 2, 3, 4, 5), ("radiology", "radiology"), "suites"),
           ("haze", (1, 2, 3), ("radiology",), "one per severity"),
           ("Haze@", (1, 2, 3, 4, 5), ("radiology",), "does not parse")]
    for name, values, suites, message in bad:
        with pytest.raises(ValueError, match=message):
            perturb.family(name, "p", values, "m", suites, registry={})(_identity)


def test_condition_names_and_parameters():
    conds = perturb.conditions("ophthalmology")
    assert len(conds) == 40 and "pixelate@1" in conds and "contrast_down@5" in conds
    assert perturb.conditions("radiology", (1, 3)) == [c for c in perturb.conditions("radiology")
                                                        if c.endswith(("@1", "@3"))]
    assert perturb.parameters("jpeg", 5) == {"family": "jpeg", "severity": 5, "quality": 10}
    with pytest.raises(KeyError, match="valid: gaussian_noise"):
        perturb.parameters("fog", 1)
    with pytest.raises(ValueError, match="severity"):
        perturb.parameters("jpeg", 6)
    with pytest.raises(KeyError, match="valid: dermatology"):
        perturb.conditions("pathology")


def test_families_keep_part_of_each_suite_in_suite_order():
    kept = ("jpeg", "ink_marks", "gaussian_noise")
    assert perturb.conditions("dermatology", (3,), kept) == ["gaussian_noise@3", "jpeg@3", "ink_marks@3"]
    assert perturb.conditions("radiology", (1, 3), kept) == ["jpeg@1", "jpeg@3", "gaussian_noise@1",
                                                             "gaussian_noise@3"]
    assert perturb.conditions("ophthalmology", (2,), ()) == perturb.conditions("ophthalmology", (2,))
    with pytest.raises(UserError, match="unknown perturbation family 'fog' in extract.families; valid: gaussian"):
        perturb.conditions("radiology", (3,), ("jpeg", "fog"))
    with pytest.raises(UserError, match="keeps none of the ophthalmology suite .*leave families empty"):
        perturb.conditions("ophthalmology", (3,), ("ink_marks",))


def test_an_unknown_name_or_severity_is_the_users_error():
    """A dataset's modality or a stored condition name comes from the user: exit 2, not a bug."""
    for call in (lambda: perturb.parameters("fog", 1), lambda: perturb.suite("pathology"),
                 lambda: perturb.parameters("jpeg", 6), lambda: perturb.conditions("radiology", (0,))):
        with pytest.raises(UserError) as info:
            call()
        assert "valid:" in str(info.value) or "severity must be one of" in str(info.value)
    assert str(perturb.NotRegistered("unknown modality 'x'")) == "unknown modality 'x'"  # no KeyError quotes


def test_every_synthetic_dataset_has_a_modality_with_a_suite():
    for name in synthetic.DATASETS:
        assert synthetic.get(name, size=0.05).modality in perturb.SUITES


def _photo(n=4, size=32, seed=0, grey=False):
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(n, 1 if grey else 3, size, size, generator=g) * 0.6 + 0.2
    x = torch.nn.functional.avg_pool2d(base, 5, stride=1, padding=2)  # smooth, like a photograph
    return x.expand(n, 3, size, size).contiguous() if grey else x


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_perturbations_are_per_image_deterministic_and_grow_with_severity(family):
    x = _photo(size=48)
    ids = ["a", "b", "c", "d"]
    distances = []
    for sev in perturb.SEVERITIES:
        y = perturb.apply(x, family, sev, ids)
        assert y.shape == x.shape and y.dtype == x.dtype and y.min() >= 0 and y.max() <= 1
        # the same image gets the same perturbation in another batch, in another position
        y2 = perturb.apply(x[[2, 0]], family, sev, ["c", "a"])
        torch.testing.assert_close(y2, y[[2, 0]], atol=1e-6, rtol=0)
        distances.append(float((y - x).abs().mean()))
    assert all(b > a for a, b in zip(distances, distances[1:])), distances
    assert distances[0] > 0


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_grey_images_stay_grey(family):
    x = _photo(grey=True)
    y = perturb.apply(x, family, 3, ["a", "b", "c", "d"])
    if family == "ink_marks":  # coloured ink on an X-ray is not a radiology corruption
        assert "ink_marks" not in perturb.SUITES["radiology"]
        return
    torch.testing.assert_close(y[:, 0], y[:, 1], atol=2 / 255, rtol=0)
    torch.testing.assert_close(y[:, 0], y[:, 2], atol=2 / 255, rtol=0)


def test_random_perturbations_differ_between_images_and_conditions():
    x = torch.full((2, 3, 16, 16), 0.5)
    for family in ("gaussian_noise", "speckle_noise", "impulse_noise", "shot_noise", "ink_marks", "motion_blur"):
        y = perturb.apply(_photo(2, 16) if family == "motion_blur" else x, family, 5, ["a", "a2"])
        assert not torch.equal(y[0], y[1]) or family == "motion_blur", family
    assert perturb.image_seed("a", "gaussian_noise@1") != perturb.image_seed("a", "gaussian_noise@2")
    assert perturb.image_seed("a", "gaussian_noise@1") == perturb.image_seed("a", "gaussian_noise@1")


def test_severity_five_is_harsh_but_still_an_image():
    """At severity 5 the image is still correlated with the clean one (not replaced by noise or a flat field)."""
    x = _photo(2, 48, seed=1)
    for family in ALL_FAMILIES:
        y = perturb.apply(x, family, 5, ["a", "b"])
        for i in range(2):
            r = np.corrcoef(x[i].flatten().numpy(), y[i].flatten().numpy())[0, 1]
            assert r > 0.2, (family, r)


def test_the_severity_table_renders_for_the_docs():
    md = perturb.table_markdown()
    assert md.count("\n") == len(perturb.SEVERITY) + 1 and "| jpeg | quality | 80 | 60 | 40 | 25 | 10 |" in md


def test_the_registry_and_its_table_are_read_without_importing_torch():
    """``crs perturbations --table`` and the settings read the registry; only perturbing needs torch."""
    code = ("import sys; from crs.extract import perturb; perturb.table_markdown(); perturb.conditions('radiology'); "
            "perturb.parameters('jpeg', 3); print(sorted(m for m in ('torch', 'torchvision') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr


def test_the_readme_holds_the_registrys_table():
    text = README.read_text()
    assert perturb.readme_with_table(text) == text, (
        "README.md's perturbation table differs from the registry in extract/perturb.py; run "
        "`python -m crs.extract.perturb --write-readme docs/datasets-and-encoders.md` from the repository root")


def test_write_readme_replaces_only_the_table_between_the_markers(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n\n{perturb.README_BEGIN}\n| stale | table |\n{perturb.README_END}\n\nrest\n")
    assert perturb.main(["--write-readme", str(readme)]) == 0
    text = readme.read_text()
    assert text == (f"intro\n\n{perturb.README_BEGIN}\n\n{perturb.table_markdown()}\n\n{perturb.README_END}"
                    "\n\nrest\n")
    assert perturb.main(["--write-readme", str(readme)]) == 0 and readme.read_text() == text
    assert "already up to date" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no perturbation table markers"):
        perturb.readme_with_table("a README without markers\n")


def test_perturbations_command_draws_a_grid(tmp_path):
    from PIL import Image
    from typer.testing import CliRunner

    out = tmp_path / "grid.png"
    r = CliRunner().invoke(app, ["perturbations", "--dataset", "demo_fundus", "--out", str(out)])
    assert r.exit_code == 0, r.output
    img = Image.open(out)
    families = len(perturb.SUITES["ophthalmology"])
    assert img.size[0] > 6 * 100 and img.size[1] > families * 100
    r = CliRunner().invoke(app, ["perturbations", "--dataset", "nope", "--out", str(out)])
    assert r.exit_code == 2 and "unknown dataset" in r.output
    r = CliRunner().invoke(app, ["perturbations", "--table"])
    assert r.exit_code == 0 and "dark_corners" in r.output


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_perturbations_on_cuda_match_the_cpu(family):
    x = _photo(3, 32)
    ids = ["a", "b", "c"]
    cpu = perturb.apply(x, family, 3, ids)
    gpu = perturb.apply(x.cuda(), family, 3, ids).cpu()
    # JPEG runs through the CPU codec on every device: its bytes are equal and the division by 255 differs
    # by at most an ulp (3e-8 on an H200; nvjpeg's decode differed by up to 11/255)
    torch.testing.assert_close(gpu, cpu, atol=1e-4, rtol=0)
