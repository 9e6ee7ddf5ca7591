"""The capture proxy in front of a real vLLM engine (the CPU build, a tiny local model).

Responses through the proxy cannot be byte-identical to a separate direct call (ids and
timestamps differ), so each pair is compared by structure: the same events, the same keys at
every level, and, with temperature 0, ignore_eos and a fixed max_tokens, the same text, finish
reasons and usage. The records must import and match the server's usage.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autotune.capture.hashing import block_hashes, hash_key
from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.measure.tiny_model import make_tiny_model
from autotune.traffic.formats import import_file
from autotune.workers.vllm.backend import VllmBackend
from autotune.workers.vllm.process import port_is_free
from tests.capture.helpers import Rig, records, rig
from tests.conftest import engine_python, vllm_processes

pytestmark = pytest.mark.integration
BLOCK = 32
MAX_TOKENS = 8
VOLATILE = {"id", "created"}  # differ between any two calls
SYSTEM = " ".join(f"rule {i}: be brief." for i in range(30))  # well over two blocks


@pytest.fixture(scope="module")
def engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("capture-vllm")
    model = make_tiny_model(work / "model")
    backend = VllmBackend(model_path=str(model), log_dir=str(work),
                          command=[engine_python(), "-m", "vllm.entrypoints.openai.api_server"],
                          extra_args=["--load-format", "dummy", "--enforce-eager"])
    backend.start(EngineConfig(max_model_len=2048, block_size=32),
                  DeploymentSpec(name="capture", model="tiny-llama", gpu="cpu", gpu_count=1,
                                 tensor_parallel_size=1, max_model_len=2048), label="capture")
    engine = backend._engine
    assert engine is not None and engine.proc is not None
    proc, port = engine.proc, engine.port
    try:
        yield engine.base_url
    finally:
        backend.stop()
    # Only this engine: other people's tests may run engines of their own on this machine.
    assert proc.poll() is not None and port_is_free(port)
    assert not any(f"--port {port} " in cmd for cmd in vllm_processes())


def _body(api: str, stream: bool, text: str = "Tell me about block sizes.",
          **extra: object) -> dict[str, object]:
    body: dict[str, object] = {"model": "autotune", "max_tokens": MAX_TOKENS, "temperature": 0,
                               "ignore_eos": True, "stream": stream, **extra}
    if api == "chat":
        body["messages"] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
    else:
        body["prompt"] = text
    return body


def _path(api: str) -> str:
    return "/v1/chat/completions" if api == "chat" else "/v1/completions"


def _events(data: bytes) -> list[Any]:
    """A stream's events, JSON decoded ([DONE] kept as a string)."""
    out: list[Any] = []
    for event in data.decode().split("\n\n"):
        if event.strip():
            assert event.startswith("data: "), event
            payload = event[len("data: "):]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def _shape(value: Any) -> Any:
    """The value with the fields that differ between calls blanked; the rest must be equal."""
    if isinstance(value, dict):
        return {k: "*" if k in VOLATILE else _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return value


async def _pair(r: Rig, api: str, body: dict[str, object]) -> tuple[bytes, bytes]:
    status_d, direct = await r.post(r.upstream_url, _path(api), body)
    status_p, proxied = await r.post(r.proxy_url, _path(api), body)
    assert status_d == status_p == 200, (direct, proxied)
    return direct, proxied


@pytest.mark.parametrize("api", ["completion", "chat"])
def test_streams_and_answers_match_a_direct_call_and_the_records_match_usage(
        engine_url: str, tmp_path: Path, api: str) -> None:
    async def go() -> dict[str, tuple[bytes, bytes]]:
        async with rig(tmp_path, upstream_url=engine_url, hash_block_tokens=BLOCK) as r:
            return {"plain": await _pair(r, api, _body(api, False)),
                    "stream": await _pair(r, api, _body(api, True)),
                    "stream+usage": await _pair(r, api, _body(
                        api, True, stream_options={"include_usage": True}))}

    pairs = asyncio.run(go())
    plain_d, plain_p = (json.loads(x) for x in pairs["plain"])
    assert _shape(plain_p) == _shape(plain_d)
    usage = plain_d["usage"]
    assert usage["completion_tokens"] == MAX_TOKENS
    for kind in ("stream", "stream+usage"):
        direct, proxied = (_events(x) for x in pairs[kind])
        assert len(proxied) == len(direct) and _shape(proxied) == _shape(direct), kind
        assert proxied[-1] == "[DONE]"
        text_key = "delta" if api == "chat" else "text"
        text = [e["choices"][0].get(text_key) for e in proxied[:-1] if e["choices"]]
        assert text == [e["choices"][0].get(text_key) for e in direct[:-1] if e["choices"]]
    plain_stream = _events(pairs["stream"][1])
    assert all("usage" not in e for e in plain_stream[:-1])  # no usage chunk it did not ask for
    assert "system_fingerprint" in plain_stream[-2]  # where vLLM puts it without include_usage
    asked = _events(pairs["stream+usage"][1])
    assert asked[-2]["choices"] == [] and asked[-2]["usage"]["prompt_tokens"] == usage["prompt_tokens"]
    if api == "completion":  # the streamed text is the answer's text
        assert "".join(e["choices"][0]["text"] for e in plain_stream[:-1]) == \
            plain_d["choices"][0]["text"]

    (path,) = tmp_path.glob("capture-*.jsonl")
    imported = import_file(path)
    assert imported.format == "openai-log" and len(imported.trace) == 3
    assert imported.trace.prompt_tokens.tolist() == [usage["prompt_tokens"]] * 3
    assert imported.trace.output_tokens.tolist() == [usage["completion_tokens"]] * 3
    assert {imported.trace.api(i) for i in range(3)} == {api}
    if api == "chat":  # the system prompt fills full blocks: hashes from /tokenize
        hashes = {tuple(h) for h in imported.trace.hash_ids}
        assert len(hashes) == 1 and len(next(iter(hashes))) == usage["prompt_tokens"] // BLOCK


def test_prefix_hashes_follow_the_servers_tokenisation(engine_url: str, tmp_path: Path) -> None:
    import urllib.request

    def tokenize(body: dict[str, object]) -> list[int]:
        req = urllib.request.Request(engine_url + "/tokenize", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())["tokens"]  # type: ignore[no-any-return]

    ids = list(range(100, 100 + 3 * BLOCK + 5))

    async def go() -> None:
        async with rig(tmp_path, upstream_url=engine_url, hash_block_tokens=BLOCK) as r:
            for body in (_body("chat", False, "first question"), _body("chat", False, "second"),
                         _body("completion", False, SYSTEM), {**_body("completion", False),
                                                              "prompt": ids}):
                path = _path("chat" if "messages" in body else "completion")
                assert (await r.post(r.proxy_url, path, body))[0] == 200

    asyncio.run(go())
    key = hash_key((tmp_path / "salt").read_bytes().strip())
    chat_a, chat_b, text, tokens = records(tmp_path)
    expected_chat = tokenize({"model": "autotune", "messages": _body("chat", False, "first question")[
        "messages"]})
    assert chat_a["hash_ids"] == list(block_hashes(expected_chat, key, BLOCK))
    shared = len(SYSTEM.split()) // BLOCK  # a token a word at least: blocks inside the system prompt
    assert chat_a["hash_ids"][:shared] == chat_b["hash_ids"][:shared]
    assert text["hash_ids"] == list(block_hashes(tokenize({"model": "autotune", "prompt": SYSTEM}),
                                                 key, BLOCK))
    assert tokens["hash_ids"] == list(block_hashes(ids, key, BLOCK)) and len(tokens["hash_ids"]) == 3
    assert tokens["prompt_tokens"] == len(ids)
