import numpy as np
import pytest

from resgrad.verify.gradcheck import check_gradients, relative_error


def _quadratic():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((4, 5))
    x = rng.standard_normal((5, 2))
    return A, x


def _matmul_grads(A, x, dout):
    return {"A": dout @ x.T, "x": A.T @ dout}


@pytest.mark.parametrize("mode", ["full", "sparse", "directional"])
def test_correct_gradients_pass_in_every_mode(mode):
    A, x = _quadratic()
    dout = np.random.default_rng(4).standard_normal((4, 2))
    rep = check_gradients(
        lambda A, x: A @ x, {"A": A, "x": x}, _matmul_grads(A, x, dout), dout=dout, mode=mode, k=7
    )
    assert rep.max_error < 1e-8, rep.summary()
    assert set(rep.per_arg) == {"A", "x"}
    assert rep.passed()


@pytest.mark.parametrize("mode", ["full", "sparse", "directional"])
def test_a_wrong_gradient_is_caught_and_located(mode):
    A, x = _quadratic()
    dout = np.ones((4, 2))
    grads = _matmul_grads(A, x, dout)
    grads["x"] = grads["x"].copy()
    grads["x"] *= 1.01  # a 1% error everywhere in one argument
    rep = check_gradients(lambda A, x: A @ x, {"A": A, "x": x}, grads, mode=mode, k=5)
    assert not rep.passed(1e-4)
    assert rep.worst.name == "x"
    assert rep.per_arg["A"] < 1e-8
    assert 1e-3 < rep.max_error < 1e-2  # |1.01a - a| / (2.01|a|) ~ 5e-3


def test_full_mode_reports_the_index_of_a_single_wrong_entry():
    A, x = _quadratic()
    grads = _matmul_grads(A, x, np.ones((4, 2)))
    grads["A"] = grads["A"].copy()
    grads["A"][2, 3] += 1.0
    rep = check_gradients(lambda A, x: A @ x, {"A": A, "x": x}, grads)
    assert rep.worst.name == "A" and rep.worst.index == (2, 3)
    assert "index (2, 3)" in rep.summary()


@pytest.mark.parametrize("mode", ["full", "sparse", "directional"])
def test_every_perturbed_entry_is_restored(mode):
    A, x = _quadratic()
    A0, x0 = A.copy(), x.copy()
    check_gradients(
        lambda A, x: A @ x, {"A": A, "x": x}, _matmul_grads(A, x, np.ones((4, 2))), mode=mode
    )
    np.testing.assert_array_equal(A, A0)
    np.testing.assert_array_equal(x, x0)


def test_sequence_arguments_and_scalar_output():
    x = np.array([1.0, -2.0, 0.5])
    rep = check_gradients(lambda x: float(np.sum(x**3)), [x], [3 * x**2])
    assert rep.max_error < 1e-8
    assert list(rep.per_arg) == ["0"]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_single_and_half_precision_are_refused(dtype):
    x = np.ones(3, dtype=dtype)
    with pytest.raises(TypeError, match=f"dtype {np.dtype(dtype).name}.*float64"):
        check_gradients(lambda x: x, {"x": x}, {"x": np.ones(3)})
    with pytest.raises(TypeError, match="float64"):
        check_gradients(lambda x: x.astype(dtype), {"x": np.ones(3)}, {"x": np.ones(3)})


def test_bad_mode_and_shapes_are_named():
    x = np.ones(3)
    with pytest.raises(ValueError, match="unknown gradcheck mode 'exact'"):
        check_gradients(lambda x: x, {"x": x}, {"x": x}, mode="exact")
    with pytest.raises(ValueError, match=r"gradient 'x' has shape \(2,\)"):
        check_gradients(lambda x: x, {"x": x}, {"x": np.ones(2)})
    with pytest.raises(ValueError, match="no matching argument"):
        check_gradients(lambda x: x, {"x": x}, {"y": x})


def test_relative_error_is_the_lessons_formula():
    a, n = np.array([1.0, 0.0]), np.array([1.5, 0.0])
    np.testing.assert_allclose(relative_error(a, n), [0.5 / 2.5, 0.0])
