# A stand-in server for the dry run (gpu-check/server-check.sh): healthy, but refuses every run
# the way a full queue does, so the client's failure path runs. Prints its port, then serves.
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def answer(self, code, body):
        data = json.dumps(body).encode() if body is not None else b"not json"
        self.send_response(code); self.send_header("content-length", str(len(data))); self.end_headers(); self.wfile.write(data)
    def do_GET(self):
        if self.path == "/healthz": self.answer(200, "ok")
        else: self.answer(200, {"memory_check_failures": 0, "last_checks": []})
    def do_POST(self):
        self.answer(503, {"error": {"code": "queue_full", "message": "the run queue is full"}})
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
