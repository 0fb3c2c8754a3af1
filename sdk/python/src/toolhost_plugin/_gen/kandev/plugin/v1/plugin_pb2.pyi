from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AgentToolRequest(_message.Message):
    __slots__ = ("invocation_id", "name", "arguments", "context")
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    name: str
    arguments: _struct_pb2.Struct
    context: AgentToolContext
    def __init__(self, invocation_id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., context: _Optional[_Union[AgentToolContext, _Mapping]] = ...) -> None: ...

class AgentToolContext(_message.Message):
    __slots__ = ("task_id", "session_id", "workspace_id", "surface", "credentials")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SURFACE_FIELD_NUMBER: _ClassVar[int]
    CREDENTIALS_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    session_id: str
    workspace_id: str
    surface: str
    credentials: _containers.RepeatedCompositeFieldContainer[Credential]
    def __init__(self, task_id: _Optional[str] = ..., session_id: _Optional[str] = ..., workspace_id: _Optional[str] = ..., surface: _Optional[str] = ..., credentials: _Optional[_Iterable[_Union[Credential, _Mapping]]] = ...) -> None: ...

class Credential(_message.Message):
    __slots__ = ("audience", "access_token", "expires_at_unix_s")
    AUDIENCE_FIELD_NUMBER: _ClassVar[int]
    ACCESS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    audience: str
    access_token: str
    expires_at_unix_s: int
    def __init__(self, audience: _Optional[str] = ..., access_token: _Optional[str] = ..., expires_at_unix_s: _Optional[int] = ...) -> None: ...

class AgentToolResponse(_message.Message):
    __slots__ = ("text", "structured_content", "is_error")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_CONTENT_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    text: str
    structured_content: _struct_pb2.Struct
    is_error: bool
    def __init__(self, text: _Optional[str] = ..., structured_content: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., is_error: _Optional[bool] = ...) -> None: ...
