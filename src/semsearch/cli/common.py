"""What every command shares: the ``semsearch`` Typer app, the consoles, the error guard (exit
code 2 on bad input) and the option parsers, public to every cli module."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import typer
from rich.console import Console

if TYPE_CHECKING:
    from ..models import Model

F = TypeVar("F", bound=Callable[..., Any])

PLAIN_HELP: dict[str, Any] = {"rich_markup_mode": None, "context_settings": {"max_content_width": 200}}
"""Every command group's help settings: click's plain help, which wraps each text to the terminal
(up to 200 columns) and never cuts it, where rich's boxes cut long texts and defaults with "…"."""

app = typer.Typer(
    help="Learn, measure and serve semantic search models against lexical baselines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    **PLAIN_HELP,
)

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2


def fail(message: str) -> None:
    """Print ``message`` as one ``error:`` line on stderr and exit with code 2 (bad input)."""
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(EXIT_BAD_INPUT)


def guard(fn: F) -> F:
    """Wrap a command so that the layers' input errors (ValueError and its kin: a bad option, an
    unreadable file, an unknown model) end it with one clear line and exit code 2, no traceback."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ..experiments import SpecError
        from ..index.pgstore import PgStoreError
        from ..models import ModelDirError

        try:
            return fn(*args, **kwargs)
        except (
            ValueError,
            FileNotFoundError,
            NotADirectoryError,
            KeyError,
            ModelDirError,
            SpecError,
            PgStoreError,
        ) as e:
            msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            fail(str(msg))

    return cast(F, wrapper)


def parse_params(pairs: list[str]) -> dict[str, Any]:
    """``--param``-style NAME=VALUE pairs as a mapping; VALUE is read as JSON (numbers, lists like
    [5,10,20], true) or else taken as a string (stats=exclude-query-pool): the parameter's type then
    decides whether it may be one."""
    params: dict[str, Any] = {}
    for p in pairs:
        k, eq, v = p.partition("=")
        if not eq or not k.strip():
            raise ValueError(f"--param {p!r}: expected NAME=VALUE (e.g. k1=1.2), got {p!r}")
        try:
            params[k.strip()] = json.loads(v)
        except json.JSONDecodeError as e:
            if v.strip()[:1] in ("[", "{", '"'):  # meant as JSON but unreadable
                raise ValueError(
                    f"--param {k.strip()}: cannot read {v!r} as JSON ({e.msg} at column {e.colno})"
                ) from None
            params[k.strip()] = v
    return params


def vector_params(kind: str, pairs: list[str]) -> dict[str, int]:
    """``--vector-param`` pairs for a vector index of ``kind``, checked before anything is encoded:
    known names, integer values (``VectorIndex.check_params``; the rest, e.g. ivfpq's ``m``
    dividing the dimension, once the vectors exist)."""
    from ..index import VectorIndex

    params = parse_params(pairs)
    for k, v in params.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"--vector-param {k}: expected an integer, got {v!r}")
    VectorIndex.check_params(kind, {})  # (an unknown --vector-index is named as such)
    try:
        VectorIndex.check_params(kind, params)
    except ValueError as e:
        raise ValueError(f"--vector-param: {e}") from None
    return params


def named_model(name_or_dir: str, param: list[str], analyzer: str | None) -> Model:
    """The model named on the command line (a registered kind or a saved model directory), made
    with its ``--param`` pairs and ``--analyzer``; a bad parameter's message starts ``--param:``."""
    from ..params import ParamError
    from ..plugins import resolve_model

    params = parse_params(param)
    if analyzer:
        params["analyzer"] = analyzer
    try:
        return resolve_model(name_or_dir, **params)
    except ParamError as e:
        raise ParamError(f"--param: {e}") from None


def bundle_models(names: list[str], param: list[str], analyzer: str | None) -> list[Model]:
    """``index build``'s models; ``--param`` and ``--analyzer`` go to the lexical one (the neural
    models are saved directories or off-the-shelf kinds)."""
    from ..plugins import KINDS

    lexical = [n for n in names if n in KINDS and KINDS[n].family in ("lexical", "termdep")]
    if (param or analyzer) and not lexical:
        raise ValueError("--param and --analyzer set the lexical model's parameters; --models names none")
    return [named_model(n, param, analyzer) if n in lexical else named_model(n, [], None) for n in names]


ONNX_CHOICES = ("fp32", "int8", "off")


def check_onnx(precision: str, option: str = "--onnx") -> None:
    """``--onnx`` (or ``option``): one of ONNX_CHOICES, and onnxruntime importable unless 'off'
    (checked before any work)."""
    from ..models import onnxrt

    if precision not in ONNX_CHOICES:
        raise ValueError(f"{option} must be one of {', '.join(ONNX_CHOICES)}, got {precision!r}")
    if precision != "off" and not onnxrt.available():
        raise ValueError(
            f"{option} {precision}: onnxruntime (and onnx) are not installed; pip install onnxruntime onnx, "
            f"or {option} off"
        )


def onnx_models(models: list[Model], precision: str) -> None:
    """Transformer models run inference (encoding the collection, and later the service's queries)
    through ONNX Runtime at ``precision``, or in torch with 'off'. A saved model whose folder holds
    an export of that precision keeps it; otherwise its current weights are exported now."""
    from ..models.transformer import TransformerModel
    from ..progress import note

    for m in models:
        m = getattr(m, "document_encoder", m)  # a static-query model: its teacher encodes the collection
        if not isinstance(m, TransformerModel):
            continue
        if precision == "off":
            m.runner = None
        elif m.runner is None or m.runner.precision != precision:
            start = time.perf_counter()
            meta = m.use_onnx(precision)
            note(
                f"{m.name}: exported to ONNX {precision} in {time.perf_counter() - start:.1f} s "
                f"(cosine to torch {meta['cosine_to_torch']:.6f})"
            )
