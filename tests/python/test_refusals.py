"""What Keel does not do, answered so that clients fail at once with a reason (issue 20):

- ACLs without an authorizer: DescribeAcls / CreateAcls / DeleteAcls answer SECURITY_DISABLED as
  Kafka's broker does without authorizer.class.name (AclApis.scala, the `authorizer match { case
  None` branches); on d704e1a they were not advertised, so `kafka-acls.sh --list` and MirrorMaker 2's
  ACL sync failed with UnsupportedVersionException.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AclBinding, AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

from clients import RDKAFKA_LOG, confluent_admin
from test_kafka_tools import KafkaTools, build_tools

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "tests" / "java" / "KeelRefusals.java"
ACL_COMMAND = "org.apache.kafka.tools.AclCommand"
# Far below the 30 s the clients would wait if they retried.
AT_ONCE_S = 10.0


@pytest.fixture(scope="module")
def tools() -> KafkaTools:
    tools = build_tools()
    classes = Path(tools.classpath.split(":", 1)[0])
    compiled = classes / "KeelRefusals.class"
    if not compiled.exists() or compiled.stat().st_mtime < SOURCE.stat().st_mtime:
        cp = tools.classpath.split(":", 1)[1]
        r = subprocess.run(["javac", "-d", str(classes), "-cp", cp, str(SOURCE)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"javac KeelRefusals.java failed:\n{r.stdout}\n{r.stderr}"
    return tools


def test_java_describe_acls_fails_at_once_with_a_reason(tools, broker):
    """The Java Admin.describeAcls() gets SecurityDisabledException."""
    run = tools.run("KeelRefusals", broker.bootstrap, timeout_s=120)
    assert run.code == 0, run.report()
    lines = {line.split(" ", 1)[0]: line for line in run.out.splitlines() if line[:4] == "ACLS"}
    assert "SecurityDisabledException" in lines["ACLS"], run.report()


def test_librdkafka_acl_calls_get_security_disabled(broker):
    """confluent-kafka's AdminClient (librdkafka): create_acls and delete_acls fail with
    SECURITY_DISABLED (Kafka's answer without an authorizer); describe_acls, which librdkafka reads
    past a top-level error, lists no ACLs — as against Kafka without an authorizer. On d704e1a the
    APIs were not advertised and every call failed with _UNSUPPORTED_FEATURE."""
    admin = confluent_admin(broker.bootstrap)
    any_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(any_filter, request_timeout=30).result() == []
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    for futures in (admin.create_acls([binding], request_timeout=30), admin.delete_acls([any_filter], request_timeout=30)):
        with pytest.raises(ck.KafkaException) as raised:
            next(iter(futures.values())).result()
        assert raised.value.args[0].code() == ck.KafkaError.SECURITY_DISABLED, raised.value


def test_kafka_acls_list_says_security_is_disabled(tools, broker):
    """`kafka-acls.sh --list` (org.apache.kafka.tools.AclCommand) reaches the broker and reports
    SecurityDisabledException — the same as against a Kafka broker without an authorizer —
    rather than that the broker does not support the API."""
    run = tools.run(ACL_COMMAND, "--bootstrap-server", broker.bootstrap, "--list")
    text = run.out + run.err
    assert "SecurityDisabledException" in text and "No Authorizer is configured" in text, run.report()
    assert "UnsupportedVersionException" not in text, run.report()





def test_refused_requests_are_logged_with_api_client_and_reason(start_broker):
    """A request answered with an error that is not routine is logged at INFO with the API, the
    client id, the error, the resource and the broker's message (issue 20: an operator sees why a
    client fails without the client's debug log): here CreateTopics of a topic that exists, from
    confluent-kafka's AdminClient with its own client.id."""
    from confluent_kafka.admin import AdminClient, NewTopic

    b = start_broker("refusals-log")
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "client.id": "refusal-check", "logger": RDKAFKA_LOG})
    for attempt in range(2):
        future = admin.create_topics([NewTopic("refused-twice", 1, 1)], request_timeout=30)["refused-twice"]
        if attempt == 0:
            future.result()
        else:
            with pytest.raises(ck.KafkaException):
                future.result()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = [line for line in b.log_text().splitlines()
                 if "request refused" in line and "api=CreateTopics" in line]
        if lines:
            break
        time.sleep(0.1)
    assert lines, b.log_tail()
    line = lines[0]
    for part in ("INFO", "client_id=refusal-check", "error=TopicAlreadyExists", "code=36", "resource=refused-twice",
                 "refused-twice"):
        assert part in line, line
