# -*- coding: utf-8 -*-
"""An OpenTelemetry collector double: the OTLP/gRPC trace service's one method, recording what each exporter sends.

    otlp_collector_double.py HOST:PORT OUT_FILE

Answers `opentelemetry.proto.collector.trace.v1.TraceService/Export` with an empty ExportTraceServiceResponse (its
wire form is zero bytes: every field unset) and appends one line per request to OUT_FILE: the hex of the request's
serialized ExportTraceServiceRequest. A trace id is 16 raw bytes inside it (Span.trace_id) and a resource's
service.name a plain string, so a reader finds both in the hex without the protobuf schema. Runs with the gateway's
virtualenv (grpcio is SMG's dependency); a real collector would decode, batch and forward - none exists here.
"""
import sys
import threading
from concurrent import futures

import grpc

METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def main():
    address, out = sys.argv[1], sys.argv[2]
    lock = threading.Lock()

    def export(request, context):
        with lock, open(out, "a", encoding="ascii") as handle:
            handle.write(request.hex() + "\n")
        return b""

    handler = grpc.method_handlers_generic_handler("opentelemetry.proto.collector.trace.v1.TraceService", {
        "Export": grpc.unary_unary_rpc_method_handler(export, request_deserializer=None, response_serializer=None)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(address)
    server.start()
    server.wait_for_termination()


if __name__ == "__main__":
    main()
