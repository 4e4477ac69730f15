"""torch-fl-publish against a real, authenticated pypiserver on 127.0.0.1, with and without faults."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import jsonschema
import pytest
from fault_proxy import Fault, fault_proxy
from support.publish import PUBLISH_SRC, PyPIServer, make_wheel, publish_env, run_publish, sha256_file

SCHEMA = json.loads((PUBLISH_SRC / "torch_fl_publish" / "result.schema.json").read_text())

pytestmark = pytest.mark.slow


def args_for(url: str, wheels: list[Path], *extra: str) -> list[str]:
    return ["--lane", "host", "--repository-url", url, "--json", "--backoff", "0.05", *extra, *map(str, wheels)]


def assert_index_holds(server: PyPIServer, wheels: list[Path]) -> None:
    """Every wheel exactly once on the index, with its sha256, read past any proxy."""
    stored = sorted(p.name for p in server.packages.iterdir())
    assert stored == sorted(w.name for w in wheels)
    for wheel in wheels:
        assert sha256_file(server.packages / wheel.name) == sha256_file(wheel)
        project = wheel.name.split("-")[0].replace("_", "-").lower()
        status, page = server.simple_page(project)
        assert status == 200
        links = re.findall(rf">{re.escape(wheel.name)}<", page)
        assert len(links) == 1, page
        assert f"#sha256={sha256_file(wheel)}" in page


def test_publish_then_rerun_is_a_no_op(pypi: PyPIServer, wheels: list[Path]) -> None:
    first = run_publish(args_for(pypi.url, wheels), publish_env(pypi))
    assert first.returncode == 0, first.stderr
    document = first.json
    jsonschema.validate(document, SCHEMA)
    assert document["version"] == 1 and document["ok"] is True
    assert {f["status"] for f in document["files"]} == {"uploaded"}
    assert all(f["verified"] and f["index_sha256"] == f["sha256"] for f in document["files"])
    assert_index_holds(pypi, wheels)
    mtimes = {p.name: p.stat().st_mtime_ns for p in pypi.packages.iterdir()}

    with fault_proxy(pypi.port, faults=[]) as proxy:
        again = run_publish(args_for(proxy.url, wheels), publish_env(pypi))
    assert again.returncode == 0, again.stderr
    assert {f["status"] for f in again.json["files"]} == {"present"}
    assert proxy.count("POST") == 0, "a re-run must not upload anything"
    assert {p.name: p.stat().st_mtime_ns for p in pypi.packages.iterdir()} == mtimes


def test_human_table_names_every_wheel(pypi: PyPIServer, wheels: list[Path]) -> None:
    done = run_publish(["--lane", "host", "--repository-url", pypi.url, *map(str, wheels)], publish_env(pypi))
    assert done.returncode == 0, done.stderr
    for wheel in wheels:
        assert wheel.name in done.stdout.replace("\n", "")
    assert "uploaded" in done.stdout and "ok:" in done.stdout


def test_same_name_other_content_is_refused(pypi: PyPIServer, tmp_path: Path) -> None:
    original = make_wheel(tmp_path / "a", salt="one")
    changed = make_wheel(tmp_path / "b", salt="two")
    assert original.name == changed.name and sha256_file(original) != sha256_file(changed)
    assert run_publish(args_for(pypi.url, [original]), publish_env(pypi)).returncode == 0

    done = run_publish(args_for(pypi.url, [changed]), publish_env(pypi))
    assert done.returncode == 1
    (entry,) = done.json["files"]
    assert entry["status"] == "refused" and entry["index_sha256"] == sha256_file(original)
    assert done.json["not_published"] == [changed.name]
    assert f"not published: {changed.name}" in done.stderr
    assert sha256_file(pypi.packages / original.name) == sha256_file(original)


def test_end_state_survives_resets_503s_and_stalls(pypi: PyPIServer, wheels: list[Path]) -> None:
    a, b, c = (w.name.encode() for w in wheels[:3])
    faults = [
        Fault("reset", match=a),  # connection reset in the middle of the upload body
        Fault("503", match=b, times=2),
        Fault("stall_response", match=c),  # stored, but the response never arrives
        Fault("stall_request", match=a),  # nothing forwarded, nothing answered
        Fault("503", method="GET", times=1),  # the first simple-page read
        Fault("stall_response", method="GET", times=1),  # and the next one
    ]
    # Short enough to make the stalls cheap, long enough for the largest wheel (FLAGOS_TEST_WHEEL_DIR's
    # may be hundreds of MB) to go through at a modest loopback rate; the stalls outlast it.
    timeout = 1.5 + max(w.stat().st_size for w in wheels) / 20e6
    with fault_proxy(pypi.port, faults, stall_seconds=timeout + 4) as proxy:
        done = run_publish(
            args_for(proxy.url, wheels, "--timeout", f"{timeout:.1f}", "--retries", "5", "--concurrency", "2"),
            publish_env(pypi),
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert all(f.fired == f.times for f in faults), [(f.kind, f.fired) for f in faults]
    statuses = {f["filename"]: f for f in done.json["files"]}
    assert all(f["status"] == "uploaded" and f["verified"] for f in statuses.values())
    assert statuses[wheels[0].name]["attempts"] >= 3
    assert statuses[wheels[2].name]["detail"] == "stored by an earlier attempt"
    assert_index_holds(pypi, wheels)


def test_persistent_failure_names_the_file(pypi: PyPIServer, wheels: list[Path]) -> None:
    broken = wheels[0]
    with fault_proxy(pypi.port, [Fault("503", match=broken.name.encode(), times=100)]) as proxy:
        done = run_publish(args_for(proxy.url, wheels, "--retries", "2"), publish_env(pypi))
    assert done.returncode == 1
    assert done.json["not_published"] == [broken.name]
    entry = next(f for f in done.json["files"] if f["filename"] == broken.name)
    assert entry["status"] == "failed" and "503" in entry["detail"] and entry["attempts"] == 3
    assert f"not published: {broken.name}" in done.stderr
    assert_index_holds(pypi, wheels[1:])


def test_credentials_never_appear_in_output(pypi: PyPIServer, wheels: list[Path]) -> None:
    secret_forms = [pypi.password, base64.b64encode(f"{pypi.username}:{pypi.password}".encode()).decode()]
    runs = [
        run_publish(args_for(pypi.url, wheels, "--debug"), publish_env(pypi)),
        run_publish(["--lane", "host", "--repository-url", pypi.url, "--debug", *map(str, wheels)], publish_env(pypi)),
        # The password in the URL, and a run that fails afterwards.
        run_publish(
            args_for(f"http://{pypi.username}:{pypi.password}@127.0.0.1:{pypi.port}/", [wheels[0]], "--debug"),
            publish_env(None),
        ),
    ]
    with fault_proxy(pypi.port, [Fault("503", times=100), Fault("503", method="GET", times=100)]) as proxy:
        runs.append(run_publish(args_for(proxy.url, wheels, "--retries", "1", "--debug"), publish_env(pypi)))
    assert [r.returncode for r in runs] == [0, 0, 0, 1]
    for done in runs:
        for secret in secret_forms:
            assert secret not in done.stdout and secret not in done.stderr
    assert f"user {pypi.username} from TORCH_FL_PUBLISH_PASSWORD" in runs[0].stderr


def test_twine_variables_are_used(pypi: PyPIServer, wheels: list[Path]) -> None:
    env = publish_env(None, TWINE_USERNAME=pypi.username, TWINE_PASSWORD=pypi.password)
    done = run_publish(args_for(pypi.url, wheels), env)
    assert done.returncode == 0, done.stderr
    assert "from TWINE_PASSWORD" in done.stderr


def test_wrong_password_is_one_line_exit_2(pypi: PyPIServer, wheels: list[Path]) -> None:
    env = publish_env(None, TORCH_FL_PUBLISH_USERNAME=pypi.username, TORCH_FL_PUBLISH_PASSWORD="wrong-one")
    done = run_publish(args_for(pypi.url, wheels), env)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()[-1:]
    assert "refused the credentials" in line and "TORCH_FL_PUBLISH_PASSWORD" in line
    assert "Traceback" not in done.stderr and "wrong-one" not in done.stderr + done.stdout
    # --json: the same line as one JSON document, with the same exit code.
    jsonschema.validate(done.json, SCHEMA)
    assert done.json == {**done.json, "ok": False, "error": line, "exit_code": 2}
    assert list(pypi.packages.iterdir()) == []

    plain = run_publish(["--lane", "host", "--repository-url", pypi.url, *map(str, wheels)], env)
    assert plain.returncode == 2 and plain.stdout == ""


def test_dry_run_uploads_nothing(pypi: PyPIServer, wheels: list[Path]) -> None:
    done = run_publish(args_for(pypi.url, wheels, "--dry-run"), publish_env(pypi))
    assert done.returncode == 0, done.stderr
    assert {f["status"] for f in done.json["files"]} == {"planned"}
    jsonschema.validate(done.json, SCHEMA)
    assert list(pypi.packages.iterdir()) == []


def test_lane_fills_the_url(pypi: PyPIServer, wheels: list[Path]) -> None:
    # pypiserver serves one lane at its root; the {lane} placeholder must land in the path.
    done = run_publish(
        [
            "--lane",
            "host",
            "--repository-url",
            pypi.url + "{lane}/",
            "--simple-url",
            pypi.url + "simple/",
            "--json",
            "--dry-run",
            str(wheels[0]),
        ],
        publish_env(pypi),
    )
    assert done.returncode == 0, done.stderr
    assert done.json["repository_url"] == pypi.url + "host/"


@pytest.mark.parametrize("hash_algo", ["md5", "off"])
def test_index_without_sha256_is_checked_by_download(tmp_path: Path, hash_algo: str) -> None:
    server = PyPIServer(tmp_path / "index", hash_algo=hash_algo)
    server.start()
    try:
        original = make_wheel(tmp_path / "a", salt="one", payload_size=100_000)
        done = run_publish(args_for(server.url, [original]), publish_env(server))
        assert done.returncode == 0, done.stderr
        (entry,) = done.json["files"]
        assert entry["verified"] and entry["index_sha256"] == sha256_file(original)

        again = run_publish(args_for(server.url, [original]), publish_env(server))
        assert again.returncode == 0 and again.json["files"][0]["status"] == "present"

        changed = make_wheel(tmp_path / "b", salt="two", payload_size=100_000)
        refused = run_publish(args_for(server.url, [changed]), publish_env(server))
        assert refused.returncode == 1 and refused.json["files"][0]["status"] == "refused"
    finally:
        server.stop()


def test_concurrency_is_bounded(pypi: PyPIServer, tmp_path: Path) -> None:
    wheels = [make_wheel(tmp_path / "d", version=f"2.13.0+host{i}") for i in range(6)]
    # Each upload is held 0.3 s in the proxy, so that overlapping uploads are seen.
    with fault_proxy(pypi.port, [Fault("delay", times=100)]) as proxy:
        done = run_publish(args_for(proxy.url, wheels, "--concurrency", "2"), publish_env(pypi))
    assert done.returncode == 0, done.stderr
    assert proxy.count("POST") == 6
    assert proxy.max_uploads_in_flight == 2
    assert_index_holds(pypi, wheels)
