"""An OTLP/HTTP receiver for traces (POST /v1/traces, protobuf or JSON bodies, gzip or not),
decoding with the OpenTelemetry project's own messages. Prints `port N`, then one JSON line
per span: ids in hex, trace state, flags, name, kind, start and end (Unix nanoseconds),
attributes as strings, status, events (name and attributes), and the export request's headers.

    otlp_receiver.py [--tls CERT.pem KEY.pem]     (HTTPS with that certificate)
    otlp_receiver.py --refuse N                   (answer the first N exports 503, Retry-After: 0)
    otlp_receiver.py --redirect STATUS LOCATION   (answer exports to /v1/traces with that redirect;
                                                   take them at any other path)
    otlp_receiver.py --hang                       (read each export and never answer)
    otlp_receiver.py --huge MIB                   (take each export, and answer 200 with MIB MiB
                                                   of body)
"""
import argparse
import gzip
import http.server
import json
import ssl
import threading

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def value(any_value):
    """A scalar attribute as the JSON value of its type; anything else as text."""
    kind = any_value.WhichOneof("value")
    if kind in ("string_value", "bool_value", "int_value", "double_value"):
        return getattr(any_value, kind)
    return str(getattr(any_value, kind)) if kind else ""


parser = argparse.ArgumentParser()
parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
parser.add_argument("--refuse", type=int, default=0, metavar="N")
parser.add_argument("--redirect", nargs=2, metavar=("STATUS", "LOCATION"))
parser.add_argument("--hang", action="store_true")
parser.add_argument("--huge", type=int, default=0, metavar="MIB")
args = parser.parse_args()
refusals = args.refuse


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        global refusals
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        if refusals > 0:
            refusals -= 1
            self.send_response(503)
            self.send_header("retry-after", "0")
            self.send_header("content-length", "0")
            self.end_headers()
            return
        if args.hang:
            threading.Event().wait()
        if args.redirect and self.path == "/v1/traces":
            self.send_response(int(args.redirect[0]))
            self.send_header("location", args.redirect[1])
            self.send_header("content-length", "0")
            self.end_headers()
            return
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        if self.path != "/v1/traces" and not args.redirect:
            self.send_error(404)
            return
        if "json" in (self.headers.get("content-type") or ""):
            json_format.Parse(body, request)
        else:
            request.ParseFromString(body)
        headers = {k.lower(): v for k, v in self.headers.items()}
        for resource_spans in request.resource_spans:
            service = {a.key: value(a.value) for a in resource_spans.resource.attributes}.get("service.name", "")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    print(json.dumps({
                        "service": service,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "trace_state": span.trace_state,
                        "flags": span.flags,
                        "name": span.name,
                        "kind": span.kind,
                        "start": span.start_time_unix_nano,
                        "end": span.end_time_unix_nano,
                        "attributes": {a.key: value(a.value) for a in span.attributes},
                        "status": {"code": span.status.code, "message": span.status.message},
                        "events": [
                            {"name": e.name, "attributes": {a.key: value(a.value) for a in e.attributes}}
                            for e in span.events
                        ],
                        "request_headers": headers,
                    }), flush=True)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        if args.huge:
            # The exporter is to stop reading and hang up: the write fails then.
            self.send_header("content-length", str(args.huge << 20))
            self.end_headers()
            try:
                for _ in range(args.huge):
                    self.wfile.write(bytes(1 << 20))
            except OSError:
                pass
            return
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
if args.tls:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*args.tls)
    server.socket = context.wrap_socket(server.socket, server_side=True)
print(f"port {server.server_address[1]}", flush=True)
server.serve_forever()
