"""Spark Connect RPCs on /metrics: each by method and gRPC status, with its latency to the
last streamed answer (governance/metrics.py), as a gRPC server interceptor of the gateway."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from governance.metrics import CONNECT_RPC_SECONDS, CONNECT_RPCS


class RpcMetrics(grpc.ServerInterceptor):
    """Counts every RPC the server has a handler for by method and gRPC status, and times it
    to its last streamed answer (governance/metrics.py). Methods no service registers are
    refused by gRPC (UNIMPLEMENTED) uncounted: their names are the caller's."""

    def intercept_service(
        self, continuation: Callable[[Any], Any], handler_call_details: Any
    ) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method.rsplit("/", 1)[-1]
        if handler.unary_unary is not None:
            return handler._replace(unary_unary=_timed(handler.unary_unary, method))
        if handler.stream_unary is not None:
            return handler._replace(stream_unary=_timed(handler.stream_unary, method))
        if handler.unary_stream is not None:
            return handler._replace(unary_stream=_timed_stream(handler.unary_stream, method))
        return handler._replace(stream_stream=_timed_stream(handler.stream_stream, method))


def _status(context: grpc.ServicerContext, failed: bool) -> str:
    code = context.code()
    if code is None:
        code = grpc.StatusCode.UNKNOWN if failed else grpc.StatusCode.OK
    return code.name


def _count(
    method: str,
    context: grpc.ServicerContext,
    failed: bool,
    start: float,
    *,
    cancelled: bool = False,
) -> None:
    status = grpc.StatusCode.CANCELLED.name if cancelled else _status(context, failed)
    CONNECT_RPCS.labels(method, status).inc()
    CONNECT_RPC_SECONDS.labels(method).observe(time.perf_counter() - start)


def _timed(behaviour: Callable[..., Any], method: str) -> Callable[..., Any]:
    def call(request: Any, context: grpc.ServicerContext) -> Any:
        start, failed = time.perf_counter(), True
        try:
            answer = behaviour(request, context)
            failed = False
            return answer
        finally:
            _count(method, context, failed, start)

    return call


def _timed_stream(behaviour: Callable[..., Any], method: str) -> Callable[..., Any]:
    def call(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        start, failed, cancelled = time.perf_counter(), True, False
        try:
            yield from behaviour(request, context)
            failed = False
        except GeneratorExit:  # the client went away mid-stream
            cancelled = True
            raise
        finally:
            _count(method, context, failed, start, cancelled=cancelled)

    return call
