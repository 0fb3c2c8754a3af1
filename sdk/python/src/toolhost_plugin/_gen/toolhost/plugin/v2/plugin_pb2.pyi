from google.protobuf import struct_pb2 as _struct_pb2
from toolhost_plugin._gen.kandev.plugin.v1 import plugin_pb2 as _plugin_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LogLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOG_LEVEL_UNSPECIFIED: _ClassVar[LogLevel]
    DEBUG: _ClassVar[LogLevel]
    INFO: _ClassVar[LogLevel]
    NOTICE: _ClassVar[LogLevel]
    WARNING: _ClassVar[LogLevel]
    ERROR: _ClassVar[LogLevel]
    CRITICAL: _ClassVar[LogLevel]
    ALERT: _ClassVar[LogLevel]
    EMERGENCY: _ClassVar[LogLevel]
LOG_LEVEL_UNSPECIFIED: LogLevel
DEBUG: LogLevel
INFO: LogLevel
NOTICE: LogLevel
WARNING: LogLevel
ERROR: LogLevel
CRITICAL: LogLevel
ALERT: LogLevel
EMERGENCY: LogLevel

class DescribeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeResponse(_message.Message):
    __slots__ = ("tools", "sdk", "shapes")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    SDK_FIELD_NUMBER: _ClassVar[int]
    SHAPES_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedScalarFieldContainer[str]
    sdk: str
    shapes: _containers.RepeatedCompositeFieldContainer[ToolShape]
    def __init__(self, tools: _Optional[_Iterable[str]] = ..., sdk: _Optional[str] = ..., shapes: _Optional[_Iterable[_Union[ToolShape, _Mapping]]] = ...) -> None: ...

class ToolShape(_message.Message):
    __slots__ = ("name", "input_schema_json", "output_schema_json", "description")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    input_schema_json: str
    output_schema_json: str
    description: str
    def __init__(self, name: _Optional[str] = ..., input_schema_json: _Optional[str] = ..., output_schema_json: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...

class HostEvent(_message.Message):
    __slots__ = ("start", "answer")
    START_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    start: Start
    answer: Answer
    def __init__(self, start: _Optional[_Union[Start, _Mapping]] = ..., answer: _Optional[_Union[Answer, _Mapping]] = ...) -> None: ...

class Start(_message.Message):
    __slots__ = ("request", "can_ask", "wants_progress", "log_level")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    CAN_ASK_FIELD_NUMBER: _ClassVar[int]
    WANTS_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    LOG_LEVEL_FIELD_NUMBER: _ClassVar[int]
    request: _plugin_pb2.AgentToolRequest
    can_ask: bool
    wants_progress: bool
    log_level: LogLevel
    def __init__(self, request: _Optional[_Union[_plugin_pb2.AgentToolRequest, _Mapping]] = ..., can_ask: _Optional[bool] = ..., wants_progress: _Optional[bool] = ..., log_level: _Optional[_Union[LogLevel, str]] = ...) -> None: ...

class Answer(_message.Message):
    __slots__ = ("question_id", "action", "content")
    class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ACTION_UNSPECIFIED: _ClassVar[Answer.Action]
        ACCEPT: _ClassVar[Answer.Action]
        DECLINE: _ClassVar[Answer.Action]
        CANCEL: _ClassVar[Answer.Action]
    ACTION_UNSPECIFIED: Answer.Action
    ACCEPT: Answer.Action
    DECLINE: Answer.Action
    CANCEL: Answer.Action
    QUESTION_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    question_id: int
    action: Answer.Action
    content: _struct_pb2.Struct
    def __init__(self, question_id: _Optional[int] = ..., action: _Optional[_Union[Answer.Action, str]] = ..., content: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class PluginEvent(_message.Message):
    __slots__ = ("progress", "log", "question", "result")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    progress: Progress
    log: Log
    question: Question
    result: ToolResult
    def __init__(self, progress: _Optional[_Union[Progress, _Mapping]] = ..., log: _Optional[_Union[Log, _Mapping]] = ..., question: _Optional[_Union[Question, _Mapping]] = ..., result: _Optional[_Union[ToolResult, _Mapping]] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("progress", "total", "message")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    progress: float
    total: float
    message: str
    def __init__(self, progress: _Optional[float] = ..., total: _Optional[float] = ..., message: _Optional[str] = ...) -> None: ...

class Log(_message.Message):
    __slots__ = ("level", "message", "data", "logger")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LOGGER_FIELD_NUMBER: _ClassVar[int]
    level: LogLevel
    message: str
    data: _struct_pb2.Value
    logger: str
    def __init__(self, level: _Optional[_Union[LogLevel, str]] = ..., message: _Optional[str] = ..., data: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., logger: _Optional[str] = ...) -> None: ...

class Question(_message.Message):
    __slots__ = ("id", "message", "requested_schema", "answers_seen")
    ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    ANSWERS_SEEN_FIELD_NUMBER: _ClassVar[int]
    id: int
    message: str
    requested_schema: _struct_pb2.Struct
    answers_seen: int
    def __init__(self, id: _Optional[int] = ..., message: _Optional[str] = ..., requested_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., answers_seen: _Optional[int] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ("content", "structured_content", "is_error")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_CONTENT_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    content: _containers.RepeatedCompositeFieldContainer[Content]
    structured_content: _struct_pb2.Struct
    is_error: bool
    def __init__(self, content: _Optional[_Iterable[_Union[Content, _Mapping]]] = ..., structured_content: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., is_error: _Optional[bool] = ...) -> None: ...

class Content(_message.Message):
    __slots__ = ("text", "image", "audio", "resource_link", "resource", "annotations")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_LINK_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    text: Text
    image: Image
    audio: Audio
    resource_link: ResourceLink
    resource: EmbeddedResource
    annotations: Annotations
    def __init__(self, text: _Optional[_Union[Text, _Mapping]] = ..., image: _Optional[_Union[Image, _Mapping]] = ..., audio: _Optional[_Union[Audio, _Mapping]] = ..., resource_link: _Optional[_Union[ResourceLink, _Mapping]] = ..., resource: _Optional[_Union[EmbeddedResource, _Mapping]] = ..., annotations: _Optional[_Union[Annotations, _Mapping]] = ...) -> None: ...

class Text(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class Image(_message.Message):
    __slots__ = ("data", "mime_type")
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    mime_type: str
    def __init__(self, data: _Optional[bytes] = ..., mime_type: _Optional[str] = ...) -> None: ...

class Audio(_message.Message):
    __slots__ = ("data", "mime_type")
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    mime_type: str
    def __init__(self, data: _Optional[bytes] = ..., mime_type: _Optional[str] = ...) -> None: ...

class ResourceLink(_message.Message):
    __slots__ = ("uri", "name", "mime_type", "description", "title", "size")
    URI_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    uri: str
    name: str
    mime_type: str
    description: str
    title: str
    size: int
    def __init__(self, uri: _Optional[str] = ..., name: _Optional[str] = ..., mime_type: _Optional[str] = ..., description: _Optional[str] = ..., title: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class EmbeddedResource(_message.Message):
    __slots__ = ("uri", "mime_type", "text", "blob")
    URI_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    BLOB_FIELD_NUMBER: _ClassVar[int]
    uri: str
    mime_type: str
    text: str
    blob: bytes
    def __init__(self, uri: _Optional[str] = ..., mime_type: _Optional[str] = ..., text: _Optional[str] = ..., blob: _Optional[bytes] = ...) -> None: ...

class Annotations(_message.Message):
    __slots__ = ("audience", "priority")
    class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ROLE_UNSPECIFIED: _ClassVar[Annotations.Role]
        USER: _ClassVar[Annotations.Role]
        ASSISTANT: _ClassVar[Annotations.Role]
    ROLE_UNSPECIFIED: Annotations.Role
    USER: Annotations.Role
    ASSISTANT: Annotations.Role
    AUDIENCE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    audience: _containers.RepeatedScalarFieldContainer[Annotations.Role]
    priority: float
    def __init__(self, audience: _Optional[_Iterable[_Union[Annotations.Role, str]]] = ..., priority: _Optional[float] = ...) -> None: ...
