import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Op(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OP_UNSPECIFIED: _ClassVar[Op]
    OP_INSERT: _ClassVar[Op]
    OP_UPDATE: _ClassVar[Op]
    OP_DELETE: _ClassVar[Op]
    OP_TRUNCATE: _ClassVar[Op]
    OP_MESSAGE: _ClassVar[Op]
    OP_READ: _ClassVar[Op]
    OP_DDL: _ClassVar[Op]
OP_UNSPECIFIED: Op
OP_INSERT: Op
OP_UPDATE: Op
OP_DELETE: Op
OP_TRUNCATE: Op
OP_MESSAGE: Op
OP_READ: Op
OP_DDL: Op

class SubscribeRequest(_message.Message):
    __slots__ = ("feed", "cursor", "tables", "ops")
    FEED_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    feed: str
    cursor: str
    tables: _containers.RepeatedScalarFieldContainer[str]
    ops: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, feed: _Optional[str] = ..., cursor: _Optional[str] = ..., tables: _Optional[_Iterable[str]] = ..., ops: _Optional[_Iterable[str]] = ...) -> None: ...

class Transaction(_message.Message):
    __slots__ = ("xid", "commit_lsn", "end_lsn", "commit_ts", "origin", "changes", "cursor", "final", "backfill")
    XID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LSN_FIELD_NUMBER: _ClassVar[int]
    END_LSN_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    BACKFILL_FIELD_NUMBER: _ClassVar[int]
    xid: int
    commit_lsn: int
    end_lsn: int
    commit_ts: _timestamp_pb2.Timestamp
    origin: str
    changes: _containers.RepeatedCompositeFieldContainer[Change]
    cursor: str
    final: bool
    backfill: str
    def __init__(self, xid: _Optional[int] = ..., commit_lsn: _Optional[int] = ..., end_lsn: _Optional[int] = ..., commit_ts: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., origin: _Optional[str] = ..., changes: _Optional[_Iterable[_Union[Change, _Mapping]]] = ..., cursor: _Optional[str] = ..., final: _Optional[bool] = ..., backfill: _Optional[str] = ...) -> None: ...

class Change(_message.Message):
    __slots__ = ("lsn", "seq", "op", "schema", "table", "key", "before", "after", "unchanged_toast", "prefix", "content", "transactional", "tables", "options", "toast_filled", "table_version", "ddl")
    class KeyEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    class BeforeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    class AfterEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    class OptionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bool
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bool] = ...) -> None: ...
    LSN_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_TOAST_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONAL_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    TOAST_FILLED_FIELD_NUMBER: _ClassVar[int]
    TABLE_VERSION_FIELD_NUMBER: _ClassVar[int]
    DDL_FIELD_NUMBER: _ClassVar[int]
    lsn: int
    seq: int
    op: Op
    schema: str
    table: str
    key: _containers.MessageMap[str, Value]
    before: _containers.MessageMap[str, Value]
    after: _containers.MessageMap[str, Value]
    unchanged_toast: _containers.RepeatedScalarFieldContainer[str]
    prefix: str
    content: bytes
    transactional: bool
    tables: _containers.RepeatedScalarFieldContainer[str]
    options: _containers.ScalarMap[str, bool]
    toast_filled: _containers.RepeatedScalarFieldContainer[str]
    table_version: int
    ddl: Ddl
    def __init__(self, lsn: _Optional[int] = ..., seq: _Optional[int] = ..., op: _Optional[_Union[Op, str]] = ..., schema: _Optional[str] = ..., table: _Optional[str] = ..., key: _Optional[_Mapping[str, Value]] = ..., before: _Optional[_Mapping[str, Value]] = ..., after: _Optional[_Mapping[str, Value]] = ..., unchanged_toast: _Optional[_Iterable[str]] = ..., prefix: _Optional[str] = ..., content: _Optional[bytes] = ..., transactional: _Optional[bool] = ..., tables: _Optional[_Iterable[str]] = ..., options: _Optional[_Mapping[str, bool]] = ..., toast_filled: _Optional[_Iterable[str]] = ..., table_version: _Optional[int] = ..., ddl: _Optional[_Union[Ddl, _Mapping]] = ...) -> None: ...

class Ddl(_message.Message):
    __slots__ = ("command", "object_type", "object", "table", "old_name", "new_name", "columns")
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    OBJECT_TYPE_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    OLD_NAME_FIELD_NUMBER: _ClassVar[int]
    NEW_NAME_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    command: str
    object_type: str
    object: str
    table: str
    old_name: str
    new_name: str
    columns: _containers.RepeatedCompositeFieldContainer[DdlColumn]
    def __init__(self, command: _Optional[str] = ..., object_type: _Optional[str] = ..., object: _Optional[str] = ..., table: _Optional[str] = ..., old_name: _Optional[str] = ..., new_name: _Optional[str] = ..., columns: _Optional[_Iterable[_Union[DdlColumn, _Mapping]]] = ...) -> None: ...

class DdlColumn(_message.Message):
    __slots__ = ("attnum", "name", "type", "type_oid", "not_null", "default", "generated", "identity", "added", "previous_name", "missing_value")
    ATTNUM_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TYPE_OID_FIELD_NUMBER: _ClassVar[int]
    NOT_NULL_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_FIELD_NUMBER: _ClassVar[int]
    GENERATED_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_NAME_FIELD_NUMBER: _ClassVar[int]
    MISSING_VALUE_FIELD_NUMBER: _ClassVar[int]
    attnum: int
    name: str
    type: str
    type_oid: int
    not_null: bool
    default: str
    generated: str
    identity: str
    added: bool
    previous_name: str
    missing_value: Value
    def __init__(self, attnum: _Optional[int] = ..., name: _Optional[str] = ..., type: _Optional[str] = ..., type_oid: _Optional[int] = ..., not_null: _Optional[bool] = ..., default: _Optional[str] = ..., generated: _Optional[str] = ..., identity: _Optional[str] = ..., added: _Optional[bool] = ..., previous_name: _Optional[str] = ..., missing_value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...

class Value(_message.Message):
    __slots__ = ("null_value", "bool_value", "int_value", "double_value", "string_value", "bytes_value", "numeric_value", "timestamp_value", "json_value", "list_value", "local_timestamp_value", "date_value", "time_value", "interval_value")
    NULL_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    BYTES_VALUE_FIELD_NUMBER: _ClassVar[int]
    NUMERIC_VALUE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_VALUE_FIELD_NUMBER: _ClassVar[int]
    JSON_VALUE_FIELD_NUMBER: _ClassVar[int]
    LIST_VALUE_FIELD_NUMBER: _ClassVar[int]
    LOCAL_TIMESTAMP_VALUE_FIELD_NUMBER: _ClassVar[int]
    DATE_VALUE_FIELD_NUMBER: _ClassVar[int]
    TIME_VALUE_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_VALUE_FIELD_NUMBER: _ClassVar[int]
    null_value: _struct_pb2.NullValue
    bool_value: bool
    int_value: int
    double_value: float
    string_value: str
    bytes_value: bytes
    numeric_value: str
    timestamp_value: _timestamp_pb2.Timestamp
    json_value: str
    list_value: ValueList
    local_timestamp_value: _timestamp_pb2.Timestamp
    date_value: str
    time_value: str
    interval_value: str
    def __init__(self, null_value: _Optional[_Union[_struct_pb2.NullValue, str]] = ..., bool_value: _Optional[bool] = ..., int_value: _Optional[int] = ..., double_value: _Optional[float] = ..., string_value: _Optional[str] = ..., bytes_value: _Optional[bytes] = ..., numeric_value: _Optional[str] = ..., timestamp_value: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., json_value: _Optional[str] = ..., list_value: _Optional[_Union[ValueList, _Mapping]] = ..., local_timestamp_value: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., date_value: _Optional[str] = ..., time_value: _Optional[str] = ..., interval_value: _Optional[str] = ...) -> None: ...

class ValueList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[Value]
    def __init__(self, values: _Optional[_Iterable[_Union[Value, _Mapping]]] = ...) -> None: ...

class ListFeedsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListFeedsResponse(_message.Message):
    __slots__ = ("feeds",)
    FEEDS_FIELD_NUMBER: _ClassVar[int]
    feeds: _containers.RepeatedCompositeFieldContainer[Feed]
    def __init__(self, feeds: _Optional[_Iterable[_Union[Feed, _Mapping]]] = ...) -> None: ...

class GetFeedRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class Feed(_message.Message):
    __slots__ = ("name", "state", "slot", "publication", "tables", "all_tables", "source", "confirmed_lsn", "head_lsn", "server_lsn", "lag_bytes", "lag_seconds", "changes_per_second", "changes_captured", "bytes_captured", "last_error", "proto_version", "slot_risk", "leader", "counters_from", "failover", "unprotected_tables", "slot_lost", "gaps", "next_attempt_at")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    PUBLICATION_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    ALL_TABLES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CONFIRMED_LSN_FIELD_NUMBER: _ClassVar[int]
    HEAD_LSN_FIELD_NUMBER: _ClassVar[int]
    SERVER_LSN_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CHANGES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    CHANGES_CAPTURED_FIELD_NUMBER: _ClassVar[int]
    BYTES_CAPTURED_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    PROTO_VERSION_FIELD_NUMBER: _ClassVar[int]
    SLOT_RISK_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FROM_FIELD_NUMBER: _ClassVar[int]
    FAILOVER_FIELD_NUMBER: _ClassVar[int]
    UNPROTECTED_TABLES_FIELD_NUMBER: _ClassVar[int]
    SLOT_LOST_FIELD_NUMBER: _ClassVar[int]
    GAPS_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: str
    slot: str
    publication: str
    tables: _containers.RepeatedScalarFieldContainer[str]
    all_tables: bool
    source: str
    confirmed_lsn: int
    head_lsn: int
    server_lsn: int
    lag_bytes: int
    lag_seconds: float
    changes_per_second: float
    changes_captured: int
    bytes_captured: int
    last_error: str
    proto_version: int
    slot_risk: SlotRisk
    leader: Leader
    counters_from: str
    failover: Failover
    unprotected_tables: _containers.RepeatedScalarFieldContainer[str]
    slot_lost: SlotLost
    gaps: _containers.RepeatedCompositeFieldContainer[Gap]
    next_attempt_at: str
    def __init__(self, name: _Optional[str] = ..., state: _Optional[str] = ..., slot: _Optional[str] = ..., publication: _Optional[str] = ..., tables: _Optional[_Iterable[str]] = ..., all_tables: _Optional[bool] = ..., source: _Optional[str] = ..., confirmed_lsn: _Optional[int] = ..., head_lsn: _Optional[int] = ..., server_lsn: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., lag_seconds: _Optional[float] = ..., changes_per_second: _Optional[float] = ..., changes_captured: _Optional[int] = ..., bytes_captured: _Optional[int] = ..., last_error: _Optional[str] = ..., proto_version: _Optional[int] = ..., slot_risk: _Optional[_Union[SlotRisk, _Mapping]] = ..., leader: _Optional[_Union[Leader, _Mapping]] = ..., counters_from: _Optional[str] = ..., failover: _Optional[_Union[Failover, _Mapping]] = ..., unprotected_tables: _Optional[_Iterable[str]] = ..., slot_lost: _Optional[_Union[SlotLost, _Mapping]] = ..., gaps: _Optional[_Iterable[_Union[Gap, _Mapping]]] = ..., next_attempt_at: _Optional[str] = ...) -> None: ...

class SlotLost(_message.Message):
    __slots__ = ("at", "slot", "reason", "last_lsn")
    AT_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LAST_LSN_FIELD_NUMBER: _ClassVar[int]
    at: str
    slot: str
    reason: str
    last_lsn: int
    def __init__(self, at: _Optional[str] = ..., slot: _Optional[str] = ..., reason: _Optional[str] = ..., last_lsn: _Optional[int] = ...) -> None: ...

class Gap(_message.Message):
    __slots__ = ("lost_after", "resumed_at", "marker_lsn", "reason", "at")
    LOST_AFTER_FIELD_NUMBER: _ClassVar[int]
    RESUMED_AT_FIELD_NUMBER: _ClassVar[int]
    MARKER_LSN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    lost_after: int
    resumed_at: int
    marker_lsn: int
    reason: str
    at: str
    def __init__(self, lost_after: _Optional[int] = ..., resumed_at: _Optional[int] = ..., marker_lsn: _Optional[int] = ..., reason: _Optional[str] = ..., at: _Optional[str] = ...) -> None: ...

class Leader(_message.Message):
    __slots__ = ("replica", "epoch", "since")
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    replica: str
    epoch: int
    since: str
    def __init__(self, replica: _Optional[str] = ..., epoch: _Optional[int] = ..., since: _Optional[str] = ...) -> None: ...

class Failover(_message.Message):
    __slots__ = ("enabled", "synced", "ready", "note", "standby_slots")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    SYNCED_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    STANDBY_SLOTS_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    synced: bool
    ready: bool
    note: str
    standby_slots: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, enabled: _Optional[bool] = ..., synced: _Optional[bool] = ..., ready: _Optional[bool] = ..., note: _Optional[str] = ..., standby_slots: _Optional[_Iterable[str]] = ...) -> None: ...

class SlotRisk(_message.Message):
    __slots__ = ("wal_status", "safe_wal_size", "retained_bytes")
    WAL_STATUS_FIELD_NUMBER: _ClassVar[int]
    SAFE_WAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    RETAINED_BYTES_FIELD_NUMBER: _ClassVar[int]
    wal_status: str
    safe_wal_size: int
    retained_bytes: int
    def __init__(self, wal_status: _Optional[str] = ..., safe_wal_size: _Optional[int] = ..., retained_bytes: _Optional[int] = ...) -> None: ...
