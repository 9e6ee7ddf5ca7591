"""The capture proxy against a fake vLLM-like upstream: pass-through, usage, privacy, 502."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from autotune.capture.hashing import block_hashes, hash_key
from autotune.traffic.formats import load_trace
from tests.capture.fake_upstream import FINGERPRINT, FakeUpstream, word_ids
from tests.capture.helpers import records, rig

API_KEY = "sk-very-secret-key-123"
LONG_TEXT = " ".join(f"w{i}" for i in range(40))


def sse_events(data: bytes) -> list[bytes]:
    return [e for e in data.split(b"\n\n") if e]


@pytest.mark.parametrize("path,body", [
    ("/v1/completions", {"model": "m", "prompt": "hello there", "max_tokens": 3}),
    ("/v1/chat/completions", {"model": "m", "max_completion_tokens": 2,
                              "messages": [{"role": "user", "content": "hi you"}]}),
])
@pytest.mark.parametrize("stream", [False, True])
def test_client_bytes_are_the_upstreams_and_the_record_has_the_usage(
        tmp_path: Path, path: str, body: dict[str, object], stream: bool) -> None:
    body = {**body, "stream": stream}

    async def go() -> tuple[bytes, bytes]:
        async with rig(tmp_path) as r:
            _, direct = await r.post(r.upstream_url, path, body)
            status, proxied = await r.post(r.proxy_url, path, body)
            assert status == 200
            return direct, proxied

    direct, proxied = asyncio.run(go())
    assert proxied == direct  # the fake is deterministic, so byte for byte
    if stream:
        assert b'"usage"' not in proxied  # the usage chunk the proxy asked for is gone
        assert FINGERPRINT.encode() in sse_events(proxied)[-2]  # back on the terminal chunk
    (rec,) = records(tmp_path)
    usage = json.loads(direct)["usage"] if not stream else None
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    assert rec["api"] == ("chat" if "chat" in path else "completion")
    assert rec["output_tokens"] == max_tokens and rec["max_tokens"] == max_tokens
    assert rec["prompt_tokens"] == (usage["prompt_tokens"] if usage else
                                    (5 if "chat" in path else 2))
    assert "text" not in rec and rec["hash_ids"] == []  # short prompts: no full block


def test_a_stream_asked_for_usage_is_passed_untouched(tmp_path: Path) -> None:
    fake = FakeUpstream()
    body = {"model": "m", "prompt": "a b c", "max_tokens": 4, "stream": True,
            "stream_options": {"include_usage": True}}

    async def go() -> tuple[bytes, bytes]:
        async with rig(tmp_path, fake) as r:
            _, direct = await r.post(r.upstream_url, "/v1/completions", body)
            _, proxied = await r.post(r.proxy_url, "/v1/completions", body)
            return direct, proxied

    direct, proxied = asyncio.run(go())
    assert proxied == direct and b'"choices":[],"usage"' in proxied
    assert fake.seen[0][2] == fake.seen[1][2]  # the request body reached upstream unchanged
    assert records(tmp_path)[0]["output_tokens"] == 4


def test_openai_style_usage_nulls_are_taken_out_again(tmp_path: Path) -> None:
    body = {"model": "m", "prompt": "a b", "max_tokens": 3, "stream": True}

    async def go() -> tuple[bytes, bytes]:
        async with rig(tmp_path, FakeUpstream(openai_style=True)) as r:
            _, direct = await r.post(r.upstream_url, "/v1/completions", body)
            _, proxied = await r.post(r.proxy_url, "/v1/completions", body)
            return direct, proxied

    direct, proxied = asyncio.run(go())
    assert proxied == direct and b"usage" not in proxied
    assert records(tmp_path)[0]["output_tokens"] == 3


def test_the_upstream_was_asked_for_usage_on_the_clients_behalf(tmp_path: Path) -> None:
    fake = FakeUpstream()
    body = {"model": "m", "prompt": "a", "stream": True, "stream_options": {"continuous": 1}}

    async def go() -> None:
        async with rig(tmp_path, fake) as r:
            await r.post(r.proxy_url, "/v1/completions", body)

    asyncio.run(go())
    sent = json.loads(fake.seen[0][2])
    assert sent["stream_options"] == {"continuous": 1, "include_usage": True}
    assert {k: v for k, v in sent.items() if k != "stream_options"} == {
        k: v for k, v in body.items() if k != "stream_options"}


def test_stream_chunks_reach_the_client_before_the_upstream_finishes(tmp_path: Path) -> None:
    from aiohttp import web

    release = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n')
        await release.wait()
        await resp.write(b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}'
                         b"\n\ndata: [DONE]\n\n")
        return resp

    from tests.capture.helpers import serving

    async def go() -> bytes:
        app = web.Application()
        app.router.add_post("/v1/completions", slow)
        async with serving(app) as url, rig(tmp_path, upstream_url=url) as r:
            async with r.client.post(r.proxy_url + "/v1/completions",
                                     json={"prompt": "x", "stream": True}) as resp:
                first = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), timeout=5)
                release.set()
                return first + await resp.read()

    data = asyncio.run(go())
    assert data == b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\ndata: [DONE]\n\n'
    assert records(tmp_path)[0]["prompt_tokens"] == 1


def test_headers_pass_through_but_are_never_recorded_or_logged(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeUpstream()
    caplog.set_level(logging.DEBUG)
    body = {"model": "m", "prompt": LONG_TEXT, "max_tokens": 2}

    async def go() -> None:
        async with rig(tmp_path, fake, hash_block_tokens=16) as r:
            status, _ = await r.post(r.proxy_url, "/v1/completions", body,
                                     headers={"Authorization": f"Bearer {API_KEY}",
                                              "X-Tenant": "t1"})
            assert status == 200

    asyncio.run(go())
    completion, tokenize = fake.seen
    assert completion[1]["Authorization"] == f"Bearer {API_KEY}" and completion[1]["X-Tenant"] == "t1"
    assert tokenize[0] == "/tokenize" and tokenize[1]["Authorization"] == f"Bearer {API_KEY}"
    everything = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert API_KEY.encode() not in everything and b"w17" not in everything  # nor the prompt
    assert API_KEY not in caplog.text


def test_text_prompts_get_hashes_through_tokenize_and_text_only_when_asked(tmp_path: Path) -> None:
    shared = " ".join(f"s{i}" for i in range(32))
    bodies = [{"model": "m", "max_tokens": 1, "messages": [
        {"role": "system", "content": shared}, {"role": "user", "content": f"question {i}"}]}
        for i in range(2)] + [{"model": "m", "prompt": LONG_TEXT, "max_tokens": 1}]

    async def go() -> bytes:
        async with rig(tmp_path, hash_block_tokens=16, store_text=True) as r:
            for body in bodies:
                path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
                assert (await r.post(r.proxy_url, path, body))[0] == 200
        return (tmp_path / "salt").read_bytes().strip()

    salt = asyncio.run(go())
    chat_a, chat_b, completion = records(tmp_path)
    key = hash_key(salt)
    assert completion["hash_ids"] == list(block_hashes(word_ids(LONG_TEXT), key, 16))
    assert len(completion["hash_ids"]) == 40 // 16 and completion["text"] == LONG_TEXT
    # the chat template's 3 ids, then 32 shared words: two full shared blocks, then they differ
    assert chat_a["hash_ids"] == chat_b["hash_ids"] and len(chat_a["hash_ids"]) == 2
    assert chat_a["text"] == f"{shared}\nquestion 0"
    assert block_hashes(word_ids(LONG_TEXT), hash_key(b"another salt"), 16) != tuple(
        completion["hash_ids"])


def test_token_id_prompts_are_hashed_without_asking_the_upstream(tmp_path: Path) -> None:
    fake = FakeUpstream()
    ids = list(range(100, 150))

    async def go() -> None:
        async with rig(tmp_path, fake, hash_block_tokens=16, salt_file=None) as r:
            await r.post(r.proxy_url, "/v1/completions", {"prompt": ids, "max_tokens": 1})
            await r.post(r.proxy_url, "/v1/completions", {"prompt": [ids], "max_tokens": 1})

    asyncio.run(go())
    key = hash_key((tmp_path / "salt").read_bytes().strip())
    a, b = records(tmp_path)
    assert a["hash_ids"] == b["hash_ids"] == list(block_hashes(ids, key, 16))
    assert len(a["hash_ids"]) == 3 and [p for p, _, _ in fake.seen] == ["/v1/completions"] * 2


def test_a_failing_tokenize_records_the_request_without_hashes(tmp_path: Path) -> None:
    async def go() -> None:
        async with rig(tmp_path, FakeUpstream(tokenize_status=404), hash_block_tokens=8) as r:
            assert (await r.post(r.proxy_url, "/v1/completions",
                                 {"prompt": LONG_TEXT, "max_tokens": 2}))[0] == 200
            assert r.proxy.counts["tokenize_failed"] == 0  # recorded after the response
        assert r.proxy.counts["tokenize_failed"] == 1

    asyncio.run(go())
    (rec,) = records(tmp_path)
    assert rec["hash_ids"] == [] and rec["prompt_tokens"] == 40


def test_other_paths_and_errors_pass_through_unrecorded(tmp_path: Path) -> None:
    async def go() -> None:
        async with rig(tmp_path) as r:
            async with r.client.get(r.proxy_url + "/v1/models?x=1") as resp:
                assert resp.status == 200 and (await resp.json())["data"][0]["id"] == "fake"
            status, data = await r.post(r.proxy_url, "/v1/completions",
                                        {"model": "missing", "prompt": "a"})
            assert status == 404 and json.loads(data)["error"]["message"] == "no such model"
            async with r.client.post(r.proxy_url + "/v1/completions", data=b"not json") as resp:
                assert resp.status == 500  # the fake's own answer to a bad body, passed on

    asyncio.run(go())
    assert records(tmp_path) == []


def test_an_unreachable_upstream_is_a_502_and_the_proxy_stays_up(tmp_path: Path) -> None:
    from autotune.workers.vllm.process import free_port

    async def go() -> None:
        async with rig(tmp_path, upstream_url=f"http://127.0.0.1:{free_port()}") as r:
            for _ in range(2):
                status, data = await r.post(r.proxy_url, "/v1/completions", {"prompt": "a"})
                assert status == 502
                assert "could not reach its upstream" in json.loads(data)["error"]["message"]
            assert r.proxy.counts["upstream_unreachable"] == 2

    asyncio.run(go())
    assert records(tmp_path) == []


def test_the_recorded_file_imports(tmp_path: Path) -> None:
    async def go() -> None:
        async with rig(tmp_path) as r:
            for i in range(5):
                await r.post(r.proxy_url, "/v1/completions",
                             {"prompt": "a " * (i + 1), "max_tokens": 4, "stream": i % 2 == 0})

    asyncio.run(go())
    (path,) = tmp_path.glob("capture-*.jsonl")
    trace = load_trace(path)
    assert sorted(trace.prompt_tokens.tolist()) == [1, 2, 3, 4, 5]
    assert trace.output_tokens.tolist() == [4] * 5 and trace.start_epoch_s is not None
