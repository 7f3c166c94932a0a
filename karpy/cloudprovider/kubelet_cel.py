"""CEL expressions in an EC2NodeClass's kubelet fields: upstream's ``NodeClassCEL`` feature gate (off by default).

Behaviour learned from aws/karpenter-provider-aws (pkg/cel/environment.go, pkg/providers/instancetype/types.go).
With the gate on, ``spec.kubelet.maxPods`` may be a string and the values of ``kubeReserved`` /
``systemReserved`` may be expressions instead of quantities; each is evaluated for every instance type with

    vcpus, memory_mib, default_enis, ips_per_eni, max_pods (int), instance_type (string)

and the functions ``min`` / ``max`` (int and double, mixed), besides CEL's own operators. An expression must
type-check to int or double (a double is truncated towards zero; an infinite or NaN one is an error).

* ``maxPods`` is resolved first (its ``max_pods`` is the default pod count, it cannot see itself); an expression
  that does not compile, fails at run time (division by zero, overflow) or gives a value outside
  [0, 2^31-1] fails the instance type, and so the whole instance-type list of the NodeClass
  (:class:`KubeletExpressionError`, "resolving maxPods").
* ``kubeReserved`` / ``systemReserved`` see the resolved ``max_pods``. A value that parses as a quantity is kept
  as it is; an expression's result takes the unit of its key -- cpu millicores rounded up to 10m, memory MiB
  rounded up to 16Mi, ephemeral-storage GiB, anything else bare -- and an expression that fails or gives a
  negative value is dropped (upstream logs it), leaving that resource's default.

With the gate off nothing here is evaluated: instance types are resolved as if a string ``maxPods`` and
expression-valued reserved entries were not there (karpy.cloudprovider.aws), and ``karpy controller``'s EC2NodeClass
controller marks a NodeClass holding one not Ready (:func:`has_expressions`; KubeletExpressionsDisabled), so
nothing launches from it, as upstream.

The expressions are compiled and type-checked by cel-expr-python, the CEL project's Python binding of its C++
implementation (``pip install 'karpy[cel]'``); it is imported only when an expression is met with the gate on.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Mapping

GATE = "NodeClassCEL"
MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1
CPU_ROUNDING_MILLICORES = 10
MEMORY_ROUNDING_MIB = 16


class KubeletExpressionError(ValueError):
    """A kubelet expression could not be resolved for an instance type: the NodeClass's instance types cannot be
    listed (a ValueError, as every NodeClass a provider cannot serve)."""


@dataclass(frozen=True)
class InstanceTypeVars:
    """The variables an expression sees for one instance type."""

    vcpus: int
    memory_mib: int
    default_enis: int
    ips_per_eni: int
    max_pods: int
    instance_type: str

    def data(self) -> dict[str, Any]:
        return {"vcpus": self.vcpus, "memory_mib": self.memory_mib, "default_enis": self.default_enis,
                "ips_per_eni": self.ips_per_eni, "max_pods": self.max_pods, "instance_type": self.instance_type}


_lock = threading.Lock()
INSTALL_HINT = ("the NodeClassCEL feature gate needs the cel-expr-python package: pip install 'karpy[cel]'")


def missing() -> str:
    """Why the gate cannot be turned on here ("" when it can)."""
    import importlib.util

    return "" if importlib.util.find_spec("cel_expr_python") is not None else INSTALL_HINT


@lru_cache(maxsize=1)
def _environment() -> Any:
    try:
        from cel_expr_python import cel
    except ImportError:  # pragma: no cover - the test extra installs it
        raise KubeletExpressionError(INSTALL_HINT) from None
    t = cel.Type

    def overloads(name: str, pick: Callable[[Any, Any], Any]) -> Any:
        out = []
        for left, right in ((t.INT, t.INT), (t.DOUBLE, t.DOUBLE), (t.INT, t.DOUBLE), (t.DOUBLE, t.INT)):
            double = t.DOUBLE in (left, right)
            impl = (lambda a, b: float(pick(a, b))) if double else pick
            out.append(cel.Overload(f"{name}_{left.name().lower()}_{right.name().lower()}",
                                    return_type=t.DOUBLE if double else t.INT, parameters=[left, right], impl=impl))
        return cel.FunctionDecl(name, out)

    variables = {"vcpus": t.INT, "memory_mib": t.INT, "default_enis": t.INT, "ips_per_eni": t.INT,
                 "max_pods": t.INT, "instance_type": t.STRING}
    env = cel.NewEnv(variables=variables, functions=[overloads("max", lambda a, b: a if a > b else b),
                                                     overloads("min", lambda a, b: a if a < b else b)])
    return cel, env


@lru_cache(maxsize=512)
def _compile(expression: str) -> Any:
    """The checked program of an expression (only successes are cached)."""
    cel, env = _environment()
    with _lock:
        try:
            program = env.compile(expression)
        except RuntimeError as e:
            raise KubeletExpressionError(f"compiling expression {expression!r}: {_first_line(e)}") from None
        kind = program.return_type()
    if kind != cel.Type.INT and kind != cel.Type.DOUBLE:
        raise KubeletExpressionError(f"expression {expression!r} must return int or double, not {kind.name().lower()}")
    return program


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.replace("INVALID_ARGUMENT: ", "").replace("ERROR: <input>:", "at ").split("\n", 1)[0]


def validate(expression: str) -> None:
    """KubeletExpressionError unless the expression compiles and returns int or double."""
    _compile(expression)


def evaluate(expression: str, variables: InstanceTypeVars) -> int:
    """The integer value of an expression for one instance type."""
    program = _compile(expression)
    cel, _ = _environment()
    with _lock:
        value = program.eval(data=variables.data())
        kind = value.type()
        result = value.value()
    where = f"expression {expression!r} for instance type {variables.instance_type}"
    if kind == cel.Type.ERROR:
        raise KubeletExpressionError(f"evaluating {where}: {str(result).replace('INVALID_ARGUMENT: ', '')}")
    if isinstance(result, bool) or not isinstance(result, (int, float)):
        raise KubeletExpressionError(f"evaluating {where}: unexpected result {result!r}")
    if isinstance(result, float):
        if math.isinf(result) or math.isnan(result):
            raise KubeletExpressionError(f"evaluating {where}: a non-finite value ({result})")
        result = max(-MAX_INT64 - 1, min(MAX_INT64, int(result)))  # truncated towards zero, as Go's int64()
    return int(result)


def resolve_max_pods(expression: str, variables: InstanceTypeVars) -> int:
    """``maxPods`` from its expression; KubeletExpressionError ("resolving maxPods") when it cannot be resolved."""
    try:
        result = evaluate(expression, variables)
    except KubeletExpressionError as e:
        raise KubeletExpressionError(f"resolving instance type {variables.instance_type}: resolving maxPods: {e}") \
            from None
    if result < 0 or result > MAX_INT32:
        raise KubeletExpressionError(
            f"resolving instance type {variables.instance_type}: resolving maxPods: expression {expression!r} "
            f"evaluated to {result}, outside the valid range [0, {MAX_INT32}]")
    return result


def _round_up(value: int, granularity: int) -> int:
    if value <= 0 or value % granularity == 0 or value > MAX_INT64 - granularity:
        return value
    return (value // granularity + 1) * granularity


def format_result(key: str, result: int) -> str:
    """An expression's result as a quantity in its key's unit."""
    if key == "cpu":
        return f"{_round_up(result, CPU_ROUNDING_MILLICORES)}m"
    if key == "memory":
        return f"{_round_up(result, MEMORY_ROUNDING_MIB)}Mi"
    if key == "ephemeral-storage":
        return f"{result}Gi"
    return str(result)


def resolve_reserved(expressions: Mapping[str, str], variables: InstanceTypeVars) -> tuple[dict[str, str], list[str]]:
    """kubeReserved / systemReserved expressions resolved to quantities, and why the dropped ones were dropped."""
    resolved: dict[str, str] = {}
    dropped: list[str] = []
    for key, expression in expressions.items():
        try:
            result = evaluate(expression, variables)
        except KubeletExpressionError as e:
            dropped.append(f"{key}: {e}")
            continue
        if result < 0:
            dropped.append(f"{key}: expression {expression!r} for instance type {variables.instance_type} "
                           f"evaluated to a negative value ({result})")
            continue
        resolved[key] = format_result(key, result)
    return resolved, dropped


def _is_quantity(value: Any) -> bool:
    from ..resources import parse_quantity

    try:
        parse_quantity(value)
        return True
    except ValueError:
        return False


def has_expressions(kubelet: Any) -> bool:
    """Whether an EC2NodeClass's ``spec.kubelet`` holds a CEL expression: a string ``maxPods``, or a
    ``kubeReserved`` / ``systemReserved`` value that is not a quantity (upstream's HasExpressions)."""
    if not isinstance(kubelet, Mapping):
        return False
    if isinstance(kubelet.get("maxPods"), str):
        return True
    return any(isinstance(values, Mapping) and any(not _is_quantity(v) for v in values.values())
               for values in (kubelet.get("kubeReserved"), kubelet.get("systemReserved")))


def reserved_for_launch(values: Mapping[str, Any], gate: bool,
                        variables: Callable[[], InstanceTypeVars]) -> dict[str, str]:
    """kubeReserved / systemReserved as a node's kubelet is configured with: the quantities as written, the
    expressions resolved for its instance type with the gate on and left out with it off (as upstream's launch
    template resolver: an expression never reaches a node verbatim)."""
    static = {str(k): str(v) for k, v in values.items() if _is_quantity(v)}
    expressions = {str(k): str(v) for k, v in values.items() if not _is_quantity(v)}
    if not gate or not expressions:
        return static
    resolved, _dropped = resolve_reserved(expressions, variables())
    return {**static, **resolved}


__all__ = ["GATE", "has_expressions", "missing", "reserved_for_launch", "InstanceTypeVars", "KubeletExpressionError", "evaluate", "format_result", "resolve_max_pods",
           "resolve_reserved", "validate"]
