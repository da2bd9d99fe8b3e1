"""Settings are checked one way: every config declares each setting with its constraint, checked on construction.

For each family of settings (training, unlearning, LoRA, DP, shadows, PII reconstruction, mask plans, attack
parameters) a bad value is given from Python, from the command line and from an experiment file: the three errors
name the field, the flag, and the file and key, and nothing was loaded or trained.
"""

from __future__ import annotations

import dataclasses

import pytest

import lmaudit as lmaudit_package
from helpers import assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit import api
from lmaudit.errors import SettingError
from lmaudit.experiments.registry import list_experiment_types, load_experiment


@pytest.fixture
def nothing_loads(monkeypatch):
    """Loading a model, training one, or starting an experiment's workspace fails the test: the settings must be
    refused first."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded or trained before the settings were checked")

    for module in ("lmaudit.models.build", "lmaudit.models.unlearn", "lmaudit.models.loading"):
        monkeypatch.setattr(f"{module}.load_model", refuse)
    monkeypatch.setattr("lmaudit.models.build.train", refuse)
    monkeypatch.setattr("lmaudit.models.build.local_model", refuse)
    monkeypatch.setattr("lmaudit.models.unlearn.check_model_dir", refuse)
    monkeypatch.setattr("lmaudit.experiments.runner.Workspace", refuse)


@pytest.fixture
def data(tmp_path):
    return write_jsonl(tmp_path / "texts.jsonl", make_texts(8, seed=5, min_words=4, max_words=9))


def assert_refused_from_python(call, message: str) -> None:
    with pytest.raises(SettingError) as raised:
        call()
    assert str(raised.value).startswith(message), str(raised.value)


def assert_refused_on_command_line(args, message: str, out) -> None:
    assert_user_error(lmaudit(*args), message)
    assert not out.exists()


def assert_refused_in_file(tmp_path, lines: str, message: str, type: str = "mia") -> None:
    f = tmp_path / "x.toml"
    f.write_text(f'name = "x"\ntype = "{type}"\n{lines}\n')
    with pytest.raises(SettingError) as raised:
        load_experiment(f)
    assert str(raised.value).startswith(f"{f}: {message}"), str(raised.value)
    exc = assert_user_error(lmaudit("run", f, "--out", tmp_path / "results"), f"{f}: {message}")
    assert "--" not in exc.on_command_line()  # the key, never a flag 'lmaudit run' does not have
    assert not (tmp_path / "results").exists()


# ---------------------------------------------------------------- one family at a time

def test_training(tmp_path, nothing_loads, data):
    out = tmp_path / "ft"
    assert_refused_from_python(lambda: api.finetune(tmp_path / "model", data, out, lr=-1.0),
                               "lr must be a positive number, got -1.0")
    assert_refused_from_python(lambda: api.finetune(tmp_path / "model", data, out, batch_size=0),
                               "batch_size must be an integer ≥ 1")
    assert_refused_from_python(lambda: api.finetune(tmp_path / "model", data, out, mode="xft"),
                               "unknown fine-tuning mode 'xft'")
    assert_refused_on_command_line(["finetune", "--model", tmp_path / "model", "--data", data, "--out", out,
                                    "--lr", "-1"], "--lr must be a positive number, got -1.0", out)
    assert_refused_on_command_line(["finetune", "--model", tmp_path / "model", "--data", data, "--out", out,
                                    "--epochs", "0"], "--epochs must be a positive number, got 0.0", out)
    assert_refused_in_file(tmp_path, "lr = -1", "lr must be a positive number, got -1.0")
    assert_refused_in_file(tmp_path, "batch_size = 0", "batch_size must be an integer ≥ 1, got 0")


def test_unlearning(tmp_path, nothing_loads, data):
    out = tmp_path / "ul"
    assert_refused_from_python(lambda: api.unlearn(tmp_path / "model", data, data, out, method="npo", npo_beta=0.0),
                "npo_beta must be a positive number, got 0.0")
    assert_refused_on_command_line(["unlearn", "--model", tmp_path / "model", "--forget", data, "--retain", data,
                                    "--out", out, "--method", "npo", "--npo-beta", "0"],
                                   "--npo-beta must be a positive number, got 0.0", out)
    assert_refused_on_command_line(["unlearn", "--model", tmp_path / "model", "--forget", data, "--retain", data,
                                    "--out", out, "--method", "npo", "--retain-weight", "-1"],
                                   "--retain-weight must be a number ≥ 0", out)
    assert_refused_in_file(tmp_path, "unlearn = { npo_beta = 0.0 }",
                           "unlearn.npo_beta must be a positive number, got 0.0", type="unlearning-audit")
    assert_refused_in_file(tmp_path, 'unlearn = { npo_bta = 0.5 }', "unlearn has no key 'npo_bta'",
                           type="unlearning-audit")
    assert_refused_in_file(tmp_path, 'unlearn_methods = ["npo", "forget"]', "unlearn_methods[1] must be",
                           type="unlearning-audit")


def test_lora(tmp_path, nothing_loads, data):
    out = tmp_path / "ft"
    assert_refused_from_python(lambda: api.finetune(tmp_path / "model", data, out, lora=0),
                               "rank must be an integer ≥ 1, got 0")
    assert_refused_on_command_line(["finetune", "--model", tmp_path / "model", "--data", data, "--out", out,
                                    "--lora", "0"], "--lora must be an integer ≥ 1, got 0", out)
    assert_refused_on_command_line(["finetune", "--model", tmp_path / "model", "--data", data, "--out", out,
                                    "--lora-alpha", "8"],
                                   "--lora-alpha applies to LoRA training only (hint: add --lora RANK)", out)
    assert_refused_in_file(tmp_path, "lora = -1", "lora must be an integer ≥ 0, got -1")


def test_differential_privacy(tmp_path, nothing_loads, data):
    from lmaudit.models.dp import DPSpec

    out = tmp_path / "ft"
    assert_refused_from_python(lambda: api.finetune(tmp_path / "model", data, out,
                                                    dp=DPSpec(epsilon=1.0, max_grad_norm=0.0)),
                               "max_grad_norm must be a positive number, got 0.0")
    assert_refused_from_python(lambda: DPSpec.given(delta=1e-5),
                               "delta applies to DP training only (hint: add epsilon= E")
    assert_refused_on_command_line(["finetune", "--model", tmp_path / "model", "--data", data, "--out", out,
                                    "--dp-epsilon", "1", "--max-grad-norm", "0"],
                                   "--max-grad-norm must be a positive number, got 0.0", out)
    assert_refused_in_file(tmp_path, "max_grad_norm = 0.0", "max_grad_norm must be a positive number, got 0.0",
                           type="dp-audit")
    assert_refused_in_file(tmp_path, "epsilons = [8.0, -1.0]", "epsilons[1] must be a number ≥ 0, got -1.0",
                           type="dp-audit")


def test_shadows(tmp_path, nothing_loads, data):
    out = tmp_path / "sh"
    assert_refused_from_python(lambda: api.shadows(tmp_path / "model", data, out, k=1),
                               "k must be an integer ≥ 2, got 1")
    assert_refused_from_python(lambda: api.shadows(tmp_path / "model", data, out, lr=0.0),
                               "lr must be a positive number, got 0.0")
    assert_refused_on_command_line(["shadows", "--model", tmp_path / "model", "--pool", data, "--out", out, "--k", "1"],
                      "--k must be an integer ≥ 2, got 1", out)
    assert_refused_in_file(tmp_path, "n_shadows = -1", "n_shadows must be an integer ≥ 0, got -1",
                           type="unlearning-audit")


def test_pii_reconstruction(tmp_path, nothing_loads, data):
    from lmaudit.runs.pii import ReconstructConfig

    out = tmp_path / "pii"
    assert_refused_from_python(lambda: ReconstructConfig(alpha="abc"), "alpha must be in [0, 1] (or 'auto'), got 'abc'")
    for option, value, message in (("--alpha", "abc", "--alpha must be in [0, 1] (or 'auto'), got 'abc'"),
                                   ("--alpha", "1.5", "--alpha must be in [0, 1] (or 'auto'), got 1.5"),
                                   ("--mask-length", "8,x", "--mask-length must be an integer ≥ 1, got 'x'"),
                                   ("--mask-length", "0", "--mask-length must be an integer ≥ 1, got 0")):
        assert_refused_on_command_line(["pii", "--model", tmp_path / "model", "--records", data, "--out", out,
                                        option, value], message, out)
    assert_refused_in_file(tmp_path, "n_targets = 0", "n_targets must be an integer ≥ 1, got 0",
                           type="pii-reconstruction")


def test_mask_plans():
    from lmaudit.attacks import get_attack
    from lmaudit.probes.masks import MaskPlan

    assert_refused_from_python(lambda: MaskPlan("cyclic", rho=0.0), "rho must be in (0, 1], got 0.0")
    assert_refused_from_python(lambda: MaskPlan("cyclic", budget=0), "budget must be an integer ≥ 1, got 0")
    assert_refused_from_python(lambda: MaskPlan("nested", r_start=0.6, r_end=0.5), "nested ratios need r_start ≤ r_end")
    with pytest.raises(SettingError) as raised:
        MaskPlan("nested", r_start=0.6, r_end=0.5)
    assert raised.value.on_command_line().startswith("nested ratios need --r-start ≤ --r-end")
    assert MaskPlan("cyclic").n_patterns == 16  # a valid plan is unchanged
    assert_refused_from_python(lambda: get_attack("q_skew", "dlm").check({"rho": 0.0}),
                               "q_skew.rho must be in (0, 1], got 0.0")
    assert_refused_from_python(lambda: get_attack("q_skew", "dlm").check({"sampling": "cyclc"}),
                "q_skew.sampling must be one of cyclic, random, got 'cyclc'")


def test_an_attack_called_directly_checks_its_declared_parameters_as_a_run_does():
    """The attack functions no longer re-check their parameters by hand: the registry's declared checks run on a
    direct call too (before the records are read), with the run's words."""
    from lmaudit.attacks.q_skew import q_skew
    from lmaudit.attacks.shadow import rmia

    assert_refused_from_python(lambda: q_skew(None, statistic="meen"),
                               "q_skew.statistic must be one of skew, mean, got 'meen'")
    assert_refused_from_python(lambda: q_skew(None, sampling="cyclc"),
                               "q_skew.sampling must be one of cyclic, random, got 'cyclc'")
    assert_refused_from_python(lambda: rmia(None, a=1.5), "rmia.a must be in [0, 1], got 1.5")
    assert_refused_from_python(lambda: rmia(None, gamma=float("nan")), "rmia.gamma must be a positive number")


def test_attack_parameters_with_choices(tmp_path, data, tiny_model_dir):
    from lmaudit.attacks import get_attack

    assert_refused_from_python(lambda: get_attack("loss", "dlm").check({"variant": "bogus"}),
                "loss.variant must be one of per_token, sum, got 'bogus'")
    assert_refused_from_python(lambda: get_attack("gradnorm", "ar").check({"p": True}),
                               "gradnorm.p must be one of 1, 2, inf, got True")
    out = tmp_path / "run"
    others = write_jsonl(tmp_path / "others.jsonl", make_texts(8, seed=6, min_words=4, max_words=9))
    assert_refused_on_command_line(["mia", "--model", tiny_model_dir, "--members", data, "--nonmembers", others,
                                    "--attacks", "gradnorm", "--param", "gradnorm.variant=l3",
                                    "--out", out, "--no-report"],
                                   "--param gradnorm.variant must be one of l2, tensor_mean, got 'l3'", out)
    assert_refused_in_file(tmp_path, '[params.loss]\nvariant = "bogus"',
                           "params.loss.variant must be one of per_token, sum, got 'bogus'")
    assert_refused_in_file(tmp_path, "[params.recall]\nshots = 0", "params.recall.shots must be an integer ≥ 1, got 0")
    assert_refused_in_file(tmp_path, '[variants.random]\nattack = "q_skew"\nsampling = "randm"',
              "variants.random.sampling must be one of cyclic, random, got 'randm'", type="ablation")


# ---------------------------------------------------------------- no other style of check remains

# dataclasses named like settings that are not settings: what a registry records, a derived plan, parsed options
NOT_SETTINGS = {"lmaudit.attacks.registry.AttackSpec", "lmaudit.models.dp.DPPlan"}
# the values a config needs where a field has no default (the rest take their defaults)
REQUIRED = {"MaskPlan": {"kind": "cyclic"}, "MaskSpec": {"kind": "suffix", "count": 4}, "LoraSpec": {"rank": 4},
            "UnlearnConfig": {"method": "npo"}, "DPSpec": {"epsilon": 8.0}}
ALONE = {("DPSpec", "noise_multiplier")}  # given instead of a required value (epsilon or noise_multiplier, not both)


def _config_classes() -> list[type]:
    """Every settings dataclass of lmaudit: each with a field declared by ``setting(check=...)``, or named like one
    (…Config, …Settings, …Spec, …Plan), found by importing every module."""
    import importlib
    import pkgutil

    found = {}
    for info in pkgutil.walk_packages(lmaudit_package.__path__, "lmaudit."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional dependency not installed (ray)
            continue
        for name, obj in vars(module).items():
            if not (isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__):
                continue
            path = f"{obj.__module__}.{name}"
            checked = any(f.metadata.get("check") for f in dataclasses.fields(obj))
            if path not in NOT_SETTINGS and (checked or name.endswith(("Config", "Settings", "Spec", "Plan"))):
                found[path] = obj
    return [found[k] for k in sorted(found)]


# (config, field) whose edge value alone breaks a rule across fields that the config checks after each field's own
CROSS_CHECKED = {
    ("RagMembershipConfig", "store_sizes"),  # each store holds the members: a size ≥ n_members
    ("DPSpec", "epsilon"), ("DPSpec", "noise_multiplier"),  # one of the two: None is taken when the other is given
    ("MaskPlan", "budget"), ("MaskPlan", "rho"),  # a cyclic round needs ⌈1/rho⌉ forwards within the budget
    ("MaskPlan", "r_start"), ("MaskPlan", "r_end"),  # nested ratios: r_start ≤ r_end
}


def _make(config: type, **values):
    required = REQUIRED.get(config.__name__) or {f.name: "x" for f in dataclasses.fields(config)
                                                 if f.default is dataclasses.MISSING
                                                 and f.default_factory is dataclasses.MISSING}
    if any((config.__name__, name) in ALONE for name in values):
        required = {}
    return config(**{**required, **values})


def test_the_settings_found_include_the_probe_and_demo_settings():
    names = {c.__name__ for c in _config_classes()}
    assert {"ARProbeConfig", "NeighbourSettings", "DemoConfig", "RealDemoConfig", "RunConfig", "ExtractConfig",
            "TrainConfig", "MIAConfig"} <= names


@pytest.mark.parametrize("config", _config_classes(), ids=lambda c: c.__name__)
def test_every_setting_of_a_config_is_declared_with_its_check(config):
    unchecked = [f.name for f in dataclasses.fields(config) if not callable(f.metadata.get("check"))]
    assert not unchecked, f"{config.__name__}: declare {unchecked} with setting(check=...)"
    _make(config)  # the defaults pass their own checks (a config made with them constructs)


@pytest.mark.parametrize("config", _config_classes(), ids=lambda c: c.__name__)
def test_every_value_a_declared_check_refuses_is_refused_naming_its_field(config):
    """As scikit-learn's invalid-parameter checks: each check says which values it refuses (made from its own
    constraint), and each is given to its field alone; the config refuses it with a SettingError naming the field."""
    tried = 0
    for f in dataclasses.fields(config):
        invalid = getattr(f.metadata["check"], "invalid", None)
        assert invalid, f"{config.__name__}.{f.name}: its check declares no refused values (settings.refusing)"
        for bad in invalid:
            with pytest.raises(SettingError) as raised:
                _make(config, **{f.name: bad})
            assert raised.value.field.split(".")[0].split("[")[0] == f.name, (config.__name__, f.name, bad)
            tried += 1
    assert tried >= 2 * len(dataclasses.fields(config))


@pytest.mark.parametrize("config", _config_classes(), ids=lambda c: c.__name__)
def test_every_edge_value_a_declared_check_allows_is_taken(config):
    """The other side of the refused values: each check's edge values (its bounds themselves, None where optional,
    each choice of a list), given to its field alone, build the config without a SettingError: a bound written
    one off (``>`` for ``≥``) would fail here."""
    for f in dataclasses.fields(config):
        for good in getattr(f.metadata["check"], "valid", ()):
            if (config.__name__, f.name) in CROSS_CHECKED:
                continue
            try:
                _make(config, **{f.name: good})
            except SettingError as exc:
                raise AssertionError(f"{config.__name__}.{f.name} = {good!r} refused: {exc}") from None


def test_most_declared_fields_name_edge_values():
    """The edge-value test above covers a field only where its check names values to take: most do (the checks of
    free text, tables and a few custom ones name none)."""
    fields = [f for c in _config_classes() for f in dataclasses.fields(c)]
    named = sum(bool(getattr(f.metadata["check"], "valid", ())) for f in fields)
    assert named >= 0.75 * len(fields), (named, len(fields))


def test_the_edge_values_sit_on_the_bounds():
    from lmaudit.settings import each, fraction, integer, one_of, positive

    assert integer(1, 8).valid == (1, 8) and integer(0, optional=True).valid == (0, None)
    assert fraction(above_zero=True).valid[1] == 1 and fraction(also=("auto",)).valid == (0, 1, "auto")
    assert one_of(("a", "b")).valid == ("a", "b") and each(integer(2)).valid == ([], [2])
    assert positive(below=1.0).valid[1] < 1.0 and 0 < positive().valid[0]


def test_experiment_files_have_no_checks_guessed_from_key_names():
    import lmaudit.experiments.config as experiment_config

    assert not hasattr(experiment_config, "_is_count") and not hasattr(experiment_config, "_COUNTS")
    assert not any(hasattr(t.config, "ZERO_MEANS_NONE") for t in list_experiment_types())


def test_the_command_line_only_builds_the_configs():
    import inspect

    import lmaudit.commands.pii as pii_command
    import lmaudit.commands.train as train_command

    for module in (pii_command, train_command):
        assert "raise " not in inspect.getsource(module), f"{module.__name__} checks settings itself"
