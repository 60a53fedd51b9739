"""The config and cluster admin APIs a broker serves: DescribeConfigs (topics and brokers, with
Kafka's sources, synonyms, types and documentation), IncrementalAlterConfigs and AlterConfigs
(validated and committed by the controller: config_admin.alter, through the broker's link), and
DescribeCluster.  The authorized-operations fields (here, in Metadata and in DescribeGroups)
answer, when a client asks, the whole operation set Kafka gives a principal every ACL allows:
this broker has no authorizer.
"""
from __future__ import annotations

from ..core.errors import Errors
from . import config_admin as ca
from . import configs as topic_configs

NOT_ASKED = -2147483648          # Kafka's "authorized operations not requested" (Integer.MIN_VALUE)
# AclOperation codes: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9,
# DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12.  Each resource's set is Kafka's
# AclEntry.supportedOperations of its resource type.
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
GROUP_OPERATIONS = sum(1 << op for op in (3, 6, 8, 10, 11))
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
MISMATCHED_ENDPOINT_TYPE, UNSUPPORTED_ENDPOINT_TYPE = 114, 115
BROKERS_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2


def operations(asked: bool, allowed: int) -> int:
    return allowed if asked else NOT_ASKED


def _entry(name: str, value: str | None, source: int, kind: str, synonyms, *, read_only: bool = False,
           docs: bool = False) -> dict:
    return {"name": name, "value": value, "read_only": read_only, "config_source": source,
            "is_default": source == ca.DEFAULT_CONFIG, "is_sensitive": False,
            "synonyms": [{"name": n, "value": v, "source": s} for n, v, s in synonyms],
            "config_type": ca.CONFIG_TYPES.get(kind, 0),
            "documentation": (ca.DOCS.get(name) or ca.DOCS.get(ca.DYNAMIC_BROKER_CONFIGS.get(name, ""), "")) if docs else None}


class AdminApis:
    """DescribeConfigs, (Incremental)AlterConfigs and DescribeCluster over a MetadataSource."""

    def __init__(self, node):
        self.node = node

    # ---- the layers a config's value comes from ---------------------------------------------------
    def _broker_layers(self, topic_name: str) -> list[tuple[str, str, int]]:
        """(broker synonym, value, source) of a topic config's broker-level layers, the one in
        force first: this broker's dynamic value, the cluster default's, the static one where it
        is not Kafka's default, Kafka's default."""
        node, name = self.node, ca.BROKER_SYNONYMS[topic_name]
        own, default = ca.dynamic_layers(node.broker_configs(), node.node_id)
        layers = []
        if name in own:
            layers.append((name, own[name], ca.DYNAMIC_BROKER_CONFIG))
        if name in default:
            layers.append((name, default[name], ca.DYNAMIC_DEFAULT_BROKER_CONFIG))
        field = topic_configs.TOPIC_CONFIGS[topic_name][0]
        static = str(node.static_min_isr if field is None else getattr(node.static_log_config, field))
        kafka = ca.kafka_default(topic_name)
        if static != kafka:
            layers.append((name, static, ca.STATIC_BROKER_CONFIG))
        layers.append((name, kafka, ca.DEFAULT_CONFIG))
        return layers

    def _topic_configs(self, topic: str, synonyms: bool, docs: bool) -> list[dict]:
        node = self.node
        own = node.topic_configs(topic)
        min_isr = node.manager.topic_min_isr.get(topic, node.manager.min_insync_replicas)
        out = []
        for name, value, mine in topic_configs.describe(node.log_config, own, min_isr):
            layers = ([(name, own[name], ca.DYNAMIC_TOPIC_CONFIG)] if mine else []) + self._broker_layers(name)
            out.append(_entry(name, value, layers[0][2], topic_configs.TOPIC_CONFIGS[name][1],
                              layers if synonyms else [], docs=docs))
        return out

    def _broker_configs(self, resource: str, synonyms: bool, docs: bool) -> list[dict]:
        node, out = self.node, []
        if resource == "":          # the cluster default resource: its dynamic configs only
            for name, value in sorted(node.broker_configs().get("", {}).items()):
                kind = topic_configs.TOPIC_CONFIGS[ca.DYNAMIC_BROKER_CONFIGS[name]][1] \
                    if name in ca.DYNAMIC_BROKER_CONFIGS else "STRING"
                layer = [(name, value, ca.DYNAMIC_DEFAULT_BROKER_CONFIG)]
                out.append(_entry(name, value, ca.DYNAMIC_DEFAULT_BROKER_CONFIG, kind, layer if synonyms else [],
                                  docs=docs))
            return out
        effective = {n: v for n, v, _ in topic_configs.describe(node.log_config, {}, node.manager.min_insync_replicas)}
        for topic_name, name in sorted(ca.BROKER_SYNONYMS.items(), key=lambda item: item[1]):
            layers = self._broker_layers(topic_name)
            out.append(_entry(name, effective[topic_name], layers[0][2], topic_configs.TOPIC_CONFIGS[topic_name][1],
                              layers if synonyms else [], docs=docs))
        for name, value, default in self._read_only():
            source = ca.STATIC_BROKER_CONFIG if value != default else ca.DEFAULT_CONFIG
            out.append(_entry(name, value, source, ca.READ_ONLY_TYPES.get(name, "INT"),
                              [(name, value, source)] if synonyms else [], read_only=True, docs=docs))
        return sorted(out, key=lambda e: e["name"])

    def _read_only(self) -> list[tuple[str, str, str | None]]:
        """(name, value, Kafka's default) of the static broker configs described read-only."""
        n = self.node
        return [("auto.create.topics.enable", str(n.auto_create_topics).lower(), "true"),
                ("broker.id", str(n.node_id), None), ("node.id", str(n.node_id), None),
                ("default.replication.factor", str(n.replication_factor), "1"),
                ("log.dirs", n.logdir.path, None), ("num.partitions", str(n.num_partitions), "1"),
                ("offsets.topic.num.partitions", str(n.offsets_partitions), "50")]

    # ---- DescribeConfigs ----------------------------------------------------------------------
    async def describe_configs(self, header, request) -> dict:
        synonyms = bool(getattr(request, "include_synonyms", False))
        docs = bool(getattr(request, "include_documentation", False))
        results = []
        for r in request.resources:
            configs, code, message = [], Errors.NONE, None
            if r.resource_type == ca.TOPIC:
                if not self.node.partitions_of(r.resource_name):
                    code, message = Errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{r.resource_name}' does not exist."
                else:
                    configs = self._topic_configs(r.resource_name, synonyms, docs)
            elif r.resource_type == ca.BROKER:
                if r.resource_name not in ("", str(self.node.node_id)):
                    code = Errors.INVALID_REQUEST
                    message = f"Unexpected broker id, expected {self.node.node_id}, but received {r.resource_name}"
                else:
                    configs = self._broker_configs(r.resource_name, synonyms, docs)
            elif r.resource_type == ca.BROKER_LOGGER:
                code, message = Errors.INVALID_REQUEST, "BROKER_LOGGER resources are not served"
            else:
                code, message = Errors.INVALID_REQUEST, f"Unsupported resource type {r.resource_type}"
            keys = r.configuration_keys
            results.append({"error_code": code, "error_message": message, "resource_type": r.resource_type,
                            "resource_name": r.resource_name,
                            "configs": [c for c in configs if keys is None or c["name"] in keys]})
        return {"results": results}

    # ---- AlterConfigs -------------------------------------------------------------------------
    async def incremental_alter_configs(self, header, request) -> dict:
        return await self._alter(request, incremental=True)

    async def alter_configs(self, header, request) -> dict:
        return await self._alter(request, incremental=False)

    async def _alter(self, request, *, incremental: bool) -> dict:
        resources = ca.request_resources(request, incremental=incremental)
        results = await self.node.alter_configs(resources, incremental=incremental,
                                                validate_only=bool(request.validate_only))
        return ca.response_body(request, results)

    # ---- DescribeCluster ----------------------------------------------------------------------
    async def describe_cluster(self, header, request) -> dict:
        node = self.node
        endpoint_type = getattr(request, "endpoint_type", BROKERS_ENDPOINT)
        body = {"error_code": Errors.NONE, "error_message": None, "endpoint_type": endpoint_type,
                "cluster_id": node.cluster_id or "", "controller_id": node.controller_id, "brokers": [],
                "cluster_authorized_operations": operations(request.include_cluster_authorized_operations,
                                                            CLUSTER_OPERATIONS)}
        if endpoint_type == CONTROLLER_ENDPOINT:
            return dict(body, error_code=MISMATCHED_ENDPOINT_TYPE, controller_id=-1,
                        error_message="The request was sent to a broker endpoint, not a controller's")
        if endpoint_type != BROKERS_ENDPOINT:
            return dict(body, error_code=UNSUPPORTED_ENDPOINT_TYPE, controller_id=-1,
                        error_message=f"Endpoint type {endpoint_type} is not supported")
        fenced_too = bool(getattr(request, "include_fenced_brokers", False))
        body["brokers"] = [{"broker_id": b, "host": host, "port": port, "rack": None, "is_fenced": fenced}
                           for b, host, port, fenced in node.broker_registrations() if fenced_too or not fenced]
        return body
