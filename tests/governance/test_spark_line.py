"""One adapter per Spark line (issue 26, item 1): the installed pyspark chooses it, and a
pyspark of any other line is refused rather than run with the wrong jars or names."""

from __future__ import annotations

from importlib.metadata import version

import grpc
import pytest

from governance.spark_line import LINE, SPARK_4, SPARK_35, UnsupportedSparkLine, line_of


@pytest.mark.parametrize(
    ("pyspark", "line"),
    [("3.5.8", SPARK_35), ("3.5.0", SPARK_35), ("4.2.0", SPARK_4), ("4.2.1", SPARK_4)],
)
def test_a_pyspark_version_chooses_its_line(pyspark, line):
    assert line_of(pyspark) is line


@pytest.mark.parametrize("pyspark", ["3.4.1", "4.0.1", "4.3.0", "5.0.0"])
def test_a_pyspark_of_no_supported_line_is_refused(pyspark):
    with pytest.raises(UnsupportedSparkLine) as caught:
        line_of(pyspark)
    assert str(caught.value) == (
        f"pyspark {pyspark} is not a supported Spark line (3.5 or 4.2); install lakegate "
        "with its spark35 or spark4 extra"
    )


def test_the_installed_pyspark_chooses_the_running_line():
    assert line_of(version("pyspark")) is LINE


def test_each_line_resolves_the_delta_artifact_of_its_scala_version():
    assert SPARK_35.delta_artifact.format(delta="3.3.2") == "io.delta:delta-spark_2.12:3.3.2"
    assert SPARK_4.delta_artifact.format(delta="4.4.0") == "io.delta:delta-spark_4.2_2.13:4.4.0"
    assert all(SPARK_35.scala in n for n in SPARK_35.resolved_jars if "delta-spark" in n)
    assert all(SPARK_4.scala in n for n in SPARK_4.resolved_jars if "delta-spark" in n)


def test_only_spark_35_fetches_the_connect_server_classes():
    assert SPARK_35.connect_package == "org.apache.spark:spark-connect_2.12:3.5.7"
    assert SPARK_4.connect_package is None


def test_the_lines_connect_client_builder_reads_a_gateway_url():
    """`lakegate sql --gateway` builds its channel on the line's builder (Spark 4 made
    ChannelBuilder abstract; its URL-reading builder is DefaultChannelBuilder)."""
    from pyspark.sql.connect.client import core

    builder = getattr(core, LINE.connect_channel_builder)("sc://gw.example:15002/;use_ssl=true")
    assert (builder.endpoint, builder.secure) == ("gw.example:15002", True)


def test_turning_the_lines_client_retries_off_leaves_none():
    """The one-shot CLI answers UNAVAILABLE at once instead of retrying for minutes."""
    from pyspark.sql.connect.client.core import SparkConnectClient

    client = SparkConnectClient("sc://gw.example:15002/;use_ssl=true")
    LINE.connect_no_retries(client)
    tries = 0
    with pytest.raises(grpc.RpcError) as caught:
        for attempt in client._retrying():  # how the client runs every call
            with attempt:
                tries += 1
                raise _unavailable()
    assert (tries, caught.value.code()) == (1, grpc.StatusCode.UNAVAILABLE)


def _unavailable() -> Exception:
    class Unavailable(grpc.RpcError, grpc.Call):  # what a refused gRPC call raises
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.UNAVAILABLE

    return Unavailable()
