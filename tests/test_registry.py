"""The registry: registration rules, availability reasons, parameters."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nmsbench
from nmsbench import NMSResult, register
from nmsbench.registry import BackendUnavailable, describe, get, unregister

# A known core set (name: family, exact); the registry may hold more, and every registered
# implementation is checked below without being named here.
CORE = {
    "torchvision": ("hard", True),
    "bitmask_two_phase": ("hard", True),
    "bitmask_classic": ("hard", True),
    "hard_fused": ("hard", True),
    "allpairs": ("allpairs", True),
    "matrix_naive": ("matrix", False),
    "matrix_fused": ("matrix", False),
    "matrix_recompute": ("matrix", False),
}
# The family definitions of tests/definitions.py that the property tests hold each family to.
DEFINITION_OF = {"hard": "hard_nms", "allpairs": "allpairs_nms", "matrix": "matrix_nms", "soft": "soft_nms", "diou": "diou_nms",
                 "weighted": "weighted_nms"}


def test_builtin_implementations_are_registered():
    impls = nmsbench.implementations()
    missing = sorted(set(CORE) - set(impls))
    assert not missing, f"built-in implementations not registered: {missing}"
    for name, (family, exact) in CORE.items():
        assert (impls[name].family, impls[name].exact) == (family, exact), name
        assert "cpu" in impls[name].devices, name


def test_every_registered_implementation_has_a_family_definition():
    import definitions

    from nmsbench.families import FAMILIES

    for name, impl in nmsbench.implementations().items():
        assert impl.name == name
        assert impl.family in FAMILIES, f"{name}: family {impl.family!r} is not in nmsbench.families.FAMILIES"
        assert impl.family in DEFINITION_OF, f"{name}: no definition of family {impl.family!r} in tests/definitions.py"
        assert callable(getattr(definitions, DEFINITION_OF[impl.family])), name
        assert impl.devices and set(impl.devices) <= {"cpu", "cuda"}, name
        assert set(impl.backends) == set(impl.devices), name


@pytest.fixture
def scratch():
    names = []
    yield names
    for name in names:
        unregister(name)


def _identity(boxes, scores, *, iou_threshold, labels=None):
    return NMSResult(torch.arange(boxes.shape[0]))


def test_missing_module_makes_a_backend_unavailable_with_the_reason(scratch):
    scratch.append("test_needs_module")
    register(name="test_needs_module", family="hard", devices=("cpu",), requires=("no_such_module_xyz",))(_identity)
    row = next(r for r in describe() if r["name"] == "test_needs_module")
    assert row["available"] is False and row["reason"] == "no_such_module_xyz not installed"
    boxes = torch.zeros(1, 4)
    with pytest.raises(BackendUnavailable, match="no_such_module_xyz not installed"):
        nmsbench.run_nms("test_needs_module", boxes, torch.ones(1))


def test_registration_rules(scratch):
    scratch.append("test_twice")
    register(name="test_twice", family="hard", devices=("cpu",))(_identity)
    with pytest.raises(ValueError, match="already has a cpu backend"):
        register(name="test_twice", family="hard", devices=("cpu",))(_identity)
    with pytest.raises(ValueError, match="another family"):
        register(name="test_twice", family="allpairs", devices=("cuda",))(_identity)
    with pytest.raises(ValueError, match="unknown family"):
        register(name="test_bad", family="soft-ish", devices=("cpu",))
    with pytest.raises(ValueError, match="devices must be"):
        register(name="test_bad", family="hard", devices=("tpu",))


def test_run_nms_without_a_backend_for_the_device(scratch):
    scratch.append("test_cuda_only")
    register(name="test_cuda_only", family="hard", devices=("cuda",))(_identity)
    with pytest.raises(BackendUnavailable, match=r"test_cuda_only has no cpu backend \(devices: cuda\)"):
        nmsbench.run_nms("test_cuda_only", torch.zeros(1, 4), torch.ones(1))


def test_broken_output_contract_is_caught(scratch):
    scratch.append("test_int32")
    register(name="test_int32", family="hard", devices=("cpu",))(
        lambda boxes, scores, *, iou_threshold, labels=None: NMSResult(torch.arange(boxes.shape[0], dtype=torch.int32))
    )
    with pytest.raises(RuntimeError, match="1-D int64"):
        nmsbench.run_nms("test_int32", torch.zeros(2, 4), torch.ones(2))


def test_matrix_params_defaults_and_checks():
    impl = nmsbench.implementations()["matrix_naive"]
    assert impl.resolve_params({}) == {"kernel": "gaussian", "sigma": 0.5, "score_threshold": 0.05}
    assert impl.resolve_params({"sigma": 2})["sigma"] == 2.0
    for bad in ({"sigma": "2"}, {"score_threshold": True}, {"kernel": 1}):
        with pytest.raises(ValueError):
            impl.resolve_params(bad)
    with pytest.raises(ValueError, match="does not take parameter"):
        nmsbench.implementations()["torchvision"].resolve_params({"sigma": 1})


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the reason on a machine without CUDA")
def test_cuda_backend_reports_no_device():
    with pytest.raises(BackendUnavailable, match="no CUDA device"):
        impl = nmsbench.implementations()["torchvision"]
        available, reason = impl.backend("cuda").availability()
        assert not available
        raise BackendUnavailable(reason)


def test_resolved_parameters_are_checked_each_new_way_and_never_shared():
    impl = get("matrix_recompute")
    first = impl.resolve_params({"sigma": 1, "kernel": "linear"})
    first["sigma"] = 99.0  # the caller's copy
    assert impl.resolve_params({"sigma": 1, "kernel": "linear"}) == {"kernel": "linear", "sigma": 1.0,
                                                                       "score_threshold": 0.05}
    assert impl.resolve_params({"sigma": 1})["sigma"] == 1.0  # kept: {"sigma": True} is an equal key
    for bad in ({"sigma": True}, {"sigma": -1}, {"sigma": [0.5]}, {"bogus": 1}):  # True == 1, but a bool is no sigma
        for _ in range(2):  # refused again: an error is never remembered as a result
            with pytest.raises(ValueError):
                impl.resolve_params(bad)
    assert impl.resolve_params({"sigma": np.float64(0.25)})["sigma"] == 0.25  # other types: checked every time
