"""clore-run's pydantic looks for no plugins, and loses nothing if pydantic's loader changes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).parents[1]

PROBE = textwrap.dedent(
    """
    import sys
    from runner import pydantic_plugins
    assert pydantic_plugins.install()
    from pydantic import BaseModel, ValidationError

    class M(BaseModel):
        n: int

    assert M.model_validate({"n": 1}).n == 1
    try:
        M.model_validate({"n": "x"})
    except ValidationError as exc:
        assert exc.errors()[0]["type"] == "int_parsing"
    loader = sys.modules[pydantic_plugins.LOADER]
    print(list(loader.get_plugins()), f"{pydantic_plugins.LOADER}.__real__" in sys.modules)
    # A name the stub does not define comes from the real module, as pydantic would get it.
    print(loader.PYDANTIC_ENTRY_POINT_GROUP)
    """
)


def test_no_plugin_is_looked_for_and_validation_is_unchanged() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[] False", "pydantic"]  # real module loaded at need


def test_once_the_real_loader_is_in_install_leaves_it() -> None:
    import pydantic.plugin._loader as real

    from runner import pydantic_plugins

    assert sys.modules[pydantic_plugins.LOADER] is real
    assert pydantic_plugins.install() is False
    assert sys.modules[pydantic_plugins.LOADER] is real
