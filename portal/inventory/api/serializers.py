from __future__ import annotations

from rest_framework import serializers

from portal.core.api.serializers import StrictSerializer
from portal.inventory.models import Fabric, Gpu, HcaPort, Node, StorageEndpoint, Switch


class GpuSerializer(serializers.ModelSerializer[Gpu]):
    node = serializers.CharField(source="node.hostname", read_only=True)

    class Meta:
        model = Gpu
        fields = ["id", "node", "index", "uuid", "pci_bus_id", "model", "memory_mib",
                  "nvlink_domain", "health"]
        read_only_fields = fields


class HcaPortSerializer(serializers.ModelSerializer[HcaPort]):
    switch = serializers.CharField(source="switch.guid", read_only=True, default=None)

    class Meta:
        model = HcaPort
        fields = ["device", "port_number", "port_guid", "node_guid", "lid", "rate", "switch",
                  "switch_port"]
        read_only_fields = fields


class NodeSerializer(serializers.ModelSerializer[Node]):
    leaf = serializers.CharField(source="leaf.description", read_only=True, default=None)
    fabric = serializers.CharField(source="fabric.name", read_only=True, default=None)
    gpu_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Node
        fields = ["id", "hostname", "state", "fabric", "leaf", "gpu_model", "gpu_count",
                  "cpu_milli", "memory_mib", "last_heartbeat", "agent_version"]
        read_only_fields = fields


class NodeDetailSerializer(NodeSerializer):
    gpus = GpuSerializer(many=True, read_only=True)
    hca_ports = HcaPortSerializer(many=True, read_only=True)

    class Meta(NodeSerializer.Meta):
        fields = [*NodeSerializer.Meta.fields, "gpus", "hca_ports"]
        read_only_fields = fields


class NodeStateSerializer(StrictSerializer):
    state = serializers.ChoiceField(choices=Node.State.choices)
    reason = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)


class SwitchSerializer(serializers.ModelSerializer[Switch]):
    fabric = serializers.CharField(source="fabric.name", read_only=True)

    class Meta:
        model = Switch
        fields = ["id", "fabric", "guid", "description", "role", "ports", "lid"]
        read_only_fields = fields


class FabricSerializer(serializers.ModelSerializer[Fabric]):
    switch_count = serializers.IntegerField(read_only=True)
    node_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Fabric
        fields = ["id", "name", "description", "switch_count", "node_count"]
        read_only_fields = fields


class CapacitySerializer(serializers.Serializer[None]):
    model = serializers.CharField()
    gpus_total = serializers.IntegerField()
    gpus_schedulable = serializers.IntegerField()
    nodes = serializers.IntegerField()


class StorageEndpointSerializer(serializers.ModelSerializer[StorageEndpoint]):
    fabric = serializers.CharField(source="fabric.name", read_only=True)

    class Meta:
        model = StorageEndpoint
        fields = ["id", "fabric", "port_guid", "name", "created"]
        read_only_fields = fields


class StorageEndpointInputSerializer(StrictSerializer):
    """A storage server's HCA port(s): one port GUID, or a node name from the fabric's
    imported ``ibnetdiscover`` output (all its ports)."""

    fabric = serializers.SlugRelatedField(slug_field="name", queryset=Fabric.objects.all())
    port_guid = serializers.CharField(max_length=20, required=False, default="",
                                      allow_blank=True)
    node_name = serializers.CharField(max_length=200, required=False, default="",
                                      allow_blank=True)
