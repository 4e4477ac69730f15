"""Routing to flaggems: which ops reach FlagGems, and route()/is_flaggems_enabled() telling the truth."""

from __future__ import annotations

from pathlib import Path

ROUTES = """
    import torch, torch_fl
    for op in ("add.Tensor", "add.Scalar", "mul.Tensor", "sigmoid", "neg", "zeros", "divide.Tensor"):
        print(op, *torch_fl.route(op))
    print("enabled", torch_fl.is_flaggems_enabled())
    """


def routes(stdout: str) -> dict[str, tuple[str, ...]]:
    return {line.split()[0]: tuple(line.split()[1:]) for line in stdout.splitlines() if line.split()}


def test_use_flaggems_routes_every_op_flag_gems_offers(run_flagos) -> None:
    table = routes(run_flagos(ROUTES, {"FLAGOS_USE_FLAGGEMS": "1"}).stdout)
    assert table["add.Tensor"] == table["mul.Tensor"] == table["sigmoid"] == ("flaggems", "flaggems")
    # Not offered, or offered but never routed (factories, random, decomposing ops): the kernel device's, quietly.
    for op in ("add.Scalar", "neg", "zeros", "divide.Tensor"):
        assert table[op] == ("host", "host"), op
    assert table["enabled"] == ("True",)


def test_per_op_entries_keep_their_providers_under_use_flaggems(run_flagos, tmp_path: Path) -> None:
    config = tmp_path / "routes.conf"
    config.write_text("default = host\nmul = cpu\n")
    table = routes(run_flagos(ROUTES, {"FLAGOS_USE_FLAGGEMS": "1", "FLAGOS_BACKEND_CONFIG": str(config),
                                       "FLAGOS_OP_sigmoid": "host"}).stdout)
    assert table["mul.Tensor"] == ("cpu", "cpu") and table["sigmoid"] == ("host", "host")
    assert table["add.Tensor"] == ("flaggems", "flaggems")


def test_an_entry_naming_flaggems_routes_only_that_op(run_flagos, tmp_path: Path) -> None:
    config = tmp_path / "routes.conf"
    config.write_text("default = host\nadd.Tensor = flaggems\n")
    result = run_flagos(ROUTES + """
    import flag_gems
    x = torch.ones(3, device="flagos")
    (x + x) * x
    print("ran", [name for name, _ in flag_gems.calls])
    """, {"FLAGOS_BACKEND_CONFIG": str(config)})
    table = routes(result.stdout)
    assert table["add.Tensor"] == ("flaggems", "flaggems")
    assert table["mul.Tensor"] == ("host", "host")  # offered by FlagGems, but not routed to it
    assert table["enabled"] == ("True",)
    assert table["ran"] == ("['add']",)


def test_an_entry_naming_an_op_flag_gems_lacks_falls_back_visibly_once(run_flagos) -> None:
    result = run_flagos("""
        import warnings, torch, torch_fl
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x = torch.ones(3, device="flagos")
            y, z = x.neg(), x.neg()
        print(torch_fl.route("neg"), y.sum().item(), z.sum().item())
        print("warnings", len(caught), caught[0].message)
        """, {"FLAGOS_OP_neg": "flaggems"})
    assert "Route(requested='flaggems', effective='host') -3.0 -3.0" in result.stdout
    assert "warnings 1 flagos: provider 'flaggems' cannot run aten::neg here; falling back to provider 'host'" in (
        result.stdout)


def test_malformed_use_flaggems_is_one_line_naming_the_value(run_flagos) -> None:
    result = run_flagos("import torch_fl, torch; torch.ones(1, device='flagos')", {"FLAGOS_USE_FLAGGEMS": "yes"},
                        check=False)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert lines[0] == (
        "torch_fl:0: FlagosSettingWarning: FLAGOS_USE_FLAGGEMS: expected 0 or 1, got 'yes'; set FLAGOS_USE_FLAGGEMS=1 "
        "to route every operator FlagGems offers to it; flagos is unusable in this process (fix or unset "
        "FLAGOS_USE_FLAGGEMS, then start the program again)")
    assert lines[-1] == (
        "torch_fl.routing.RoutingError: flagos cannot be used: FLAGOS_USE_FLAGGEMS: expected 0 or 1, got 'yes'; set "
        "FLAGOS_USE_FLAGGEMS=1 to route every operator FlagGems offers to it — fix or unset FLAGOS_USE_FLAGGEMS, then "
        "start the program again")


def test_reinstalling_a_table_without_flaggems_unregisters_its_kernels(run_flagos) -> None:
    result = run_flagos("""
        import torch, torch_fl, flag_gems
        from torch_fl import routing
        x = torch.ones(3, device="flagos")
        x + x
        print("before", torch_fl.route("add.Tensor").effective, torch_fl.is_flaggems_enabled())
        routing.install(routing.load("host", environ={}), log_dispatch=False)
        print("after", torch_fl.route("add.Tensor").effective, torch_fl.is_flaggems_enabled(), (x + x).sum().item())
        routing.install(routing.load("host", environ={"FLAGOS_USE_FLAGGEMS": "1"}), log_dispatch=False)
        print("again", torch_fl.route("add.Tensor").effective, (x + x).sum().item())
        print("ran", [name for name, _ in flag_gems.calls])
        """, {"FLAGOS_USE_FLAGGEMS": "1"})
    lines = result.stdout.splitlines()
    assert "before flaggems True" in lines
    assert "after host False 6.0" in lines
    assert "again flaggems 6.0" in lines
    assert "ran ['add', 'add']" in lines
