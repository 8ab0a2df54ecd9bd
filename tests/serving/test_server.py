"""``transduce serve`` as a user runs it: a real uvicorn process on a loopback port."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
import urllib.error
import urllib.request

from ..helpers import cli

SENTENCES = ["the cat sat on the mat", "a big dog runs", "", "red blue house"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def call(url: str, body=None, timeout: float = 60.0) -> tuple[int, dict | str]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, method="POST" if data is not None else "GET",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            status, text = answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def test_a_served_model_answers_like_translate(served_run, start_server):
    port = free_port()
    server = start_server(served_run, "--beam", "3", port=port)
    assert server.url == f"http://127.0.0.1:{port}"
    assert (
        f"serving {served_run}" in server.text() and "device cpu, precision fp32" in server.text()
    )
    assert call(server.url + "/health") == (200, {"status": "ready"})
    expected = cli(
        "translate", str(served_run), "--beam", "3", input="\n".join(SENTENCES) + "\n"
    ).stdout
    status, body = call(server.url + "/v1/translate", {"text": SENTENCES})
    assert status == 200 and body["translations"] == expected.split("\n")[:-1]
    status, info = call(server.url + "/v1/model")
    assert status == 200 and info["search"]["beam"] == 3 and info["source_language"] == "en"
    status, metrics = call(server.url + "/metrics")
    assert (
        status == 200 and 'transduce_requests_total{path="/v1/translate",status="200"} 1' in metrics
    )
    status, page = call(server.url + "/")
    assert status == 200 and "<title>transduce" in page
    # a second server on the same port is a message, not a traceback
    taken = cli("serve", str(served_run), "--port", str(port), check=False)
    assert taken.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in taken.stderr
    assert "choose another --port" in taken.stderr and "Traceback" not in taken.stderr
    assert server.stop() == 0


def test_slow_and_vanishing_clients_do_not_block_others(served_run, start_server):
    server = start_server(served_run)
    host, port = server.url.removeprefix("http://").split(":")
    body = json.dumps({"text": ["the cat sat"]}).encode()
    head = (f"POST /v1/translate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    slow = socket.create_connection((host, int(port)))
    slow.sendall(head + body[:5])  # and then nothing: a client on a very slow line
    gone = socket.create_connection((host, int(port)))
    gone.sendall(head + body)
    gone.close()  # a client that went away before its answer
    # each answered while the slow client holds its connection (a blocked server times out)
    for _ in range(3):
        status, answer = call(
            server.url + "/v1/translate", {"text": ["a dog runs", "the cat sat"]}, timeout=30
        )
        assert status == 200 and len(answer["translations"]) == 2
    slow.sendall(body[5:])  # the slow client finishes and gets its answer too
    reply = slow.recv(65536).decode()
    slow.close()
    assert reply.startswith("HTTP/1.1 200")
    assert server.stop() == 0


HELD = """
import time
from pathlib import Path
from transduce.serving.worker import Worker
_run = Worker._run
def _held(self):
    while not Path({release!r}).exists():  # held until the test lets it go
        time.sleep(0.01)
    _run(self)
Worker._run = _held
"""


def test_sigterm_finishes_requests_in_flight_and_refuses_new_ones(served_run, start_server,
                                                                   tmp_path):
    """Three requests are in flight (the worker is held: none is answered) when SIGTERM comes: a
    request sent once the server says it is stopping gets 503, the three get their translations
    once the worker goes on, the process exits 0. (A stopping batcher sends what waits for company
    at once: tests/serving/test_worker.py; the continuous batcher's draining:
    tests/serving/test_continuous.py.)"""
    release = tmp_path / "release"
    server = start_server(served_run, "--batching", "dynamic",
                          prelude=HELD.format(release=str(release)))
    answers: dict[int, tuple] = {}
    bodies = [{"text": [s]} for s in ("the cat sat", "a dog runs", "red blue house")]
    threads = [
        threading.Thread(
            target=lambda n=n: answers.__setitem__(n, call(server.url + "/v1/translate", bodies[n]))
        )
        for n in range(3)
    ]
    for thread in threads:
        thread.start()

    def until(condition, what: str) -> None:
        deadline = time.monotonic() + 300  # a deadlock guard, not a speed limit
        while not condition():
            assert time.monotonic() < deadline, what
            time.sleep(0.05)

    in_flight = "transduce_requests_in_flight 3"
    until(lambda: in_flight in call(server.url + "/metrics")[1], "never in flight")
    server.process.send_signal(signal.SIGTERM)
    until(lambda: call(server.url + "/health")[0] == 503, "the server never said it was stopping")
    late = call(server.url + "/v1/translate", {"text": ["the cat"]})
    assert not answers  # still held
    release.touch()
    for thread in threads:
        thread.join(300)
    assert late == (503, {"detail": "the server is stopping; it takes no new requests"})
    expected = [
        cli("translate", str(served_run), input=b["text"][0] + "\n").stdout.strip() for b in bodies
    ]
    assert [answers[n][0] for n in range(3)] == [200] * 3
    assert [answers[n][1]["translations"][0] for n in range(3)] == expected
    assert server.process.wait(300) == 0
    log = server.text()
    assert "stopping: finishing 3 request(s) in flight" in log and log.rstrip().endswith("stopped")


def test_serve_without_the_extra_says_what_to_install(served_run, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if uvicorn were not installed
    result = cli("serve", str(served_run), "--port", "0", check=False)
    assert result.returncode == 2 and "pip install 'transduce[serve]'" in result.stderr


def test_a_body_that_never_arrives_is_timed_out_and_foreign_hosts_are_refused(
    served_run, start_server
):
    server = start_server(served_run, "--body-timeout", "1")
    host, port = server.url.removeprefix("http://").split(":")
    body = json.dumps({"text": ["the cat sat"]}).encode()
    stalled = socket.create_connection((host, int(port)))
    stalled.sendall((f"POST /v1/translate HTTP/1.1\r\nHost: {host}\r\n"
                     "Content-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n").encode() + body[:5])  # and no more
    stalled.settimeout(60)
    reply = b""
    while b"did not arrive" not in reply:  # the head and the body may come in separate reads
        chunk = stalled.recv(65536)
        if not chunk:
            break
        reply += chunk
    stalled.close()
    assert reply.startswith(b"HTTP/1.1 408") and b"did not arrive within 1 s" in reply, reply
    # a connection that sends nothing, and one that sends its head a byte at a time, are closed
    # too (uvicorn by itself keeps both open for as long as they like)
    silent = socket.create_connection((host, int(port)))
    trickling = socket.create_connection((host, int(port)))
    head = f"GET /health HTTP/1.1\r\nHost: {host}\r\n".encode()
    trickling.settimeout(0.2)
    replies = {silent: b"", trickling: b""}
    for byte in range(len(head)):  # about 0.2 s a byte: well past the deadline before the head ends
        # (read first: a byte sent after the server closed would reset the connection, losing its
        # answer)
        try:
            chunk = trickling.recv(65536)
            replies[trickling] += chunk
            if not chunk or b"408" in replies[trickling]:
                break
        except socket.timeout:
            pass
        try:
            trickling.sendall(head[byte:byte + 1])
        # the server closed it: its answer is read below
        except (BrokenPipeError, ConnectionResetError):
            break
    for connection in replies:
        connection.settimeout(60)
        try:
            while chunk := connection.recv(65536):
                replies[connection] += chunk
        except ConnectionResetError:
            # a server that closes with trickled bytes of ours unread ends the connection with a
            # reset instead of an end of stream: the kernel hands over its 408 first, then the
            # reset (the assertions below check that the 408 came)
            pass
        connection.close()
        assert replies[connection].startswith(b"HTTP/1.1 408"), replies[connection]
        assert b"head did not arrive within 1 s" in replies[connection]
    rebound = urllib.request.Request(
        server.url + "/v1/model", headers={"Host": f"rebinding.example:{port}"}
    )
    try:
        urllib.request.urlopen(rebound, timeout=30)
        raise AssertionError("a foreign Host was answered")
    except urllib.error.HTTPError as error:
        assert error.code == 403 and "rebinding.example" in error.read().decode()
    assert call(server.url + "/v1/translate", {"text": ["the cat"]})[0] == 200  # the server goes on
    assert server.stop() == 0
