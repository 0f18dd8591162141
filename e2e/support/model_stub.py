"""A model provider stub for the provenance tests and the AgentDojo
replay: answers every POST with a minimal OpenAI Chat Completions response
and appends each request's body to the log file given as the third
argument (/dev/null keeps none).

usage: model_stub.py HOST PORT REQUEST_LOG
"""

import http.server
import json
import sys

host, port, log_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]

ANSWER = json.dumps(
    {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}
        ],
    }
).encode()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        with open(log_path, "ab") as log:
            log.write(body + b"\n")
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer((host, port), Handler).serve_forever()
