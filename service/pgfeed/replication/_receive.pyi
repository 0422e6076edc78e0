"""Types of the compiled receive loop (_receive.c); see stream.py's ``_receive_py``."""

def receive(conn: int, get_copy_data: int, freemem: int, consume_input: int, max_messages: int, /,
            ) -> tuple[int, bytes, list[tuple[int, int, int]], list[tuple[int, bool]], int,
                       bytes | None]: ...
