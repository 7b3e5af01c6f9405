"""The text of an MCP answer: corral's tools and prompts answer text only."""

from __future__ import annotations

from mcp.types import ContentBlock, TextContent


def text_of(content: ContentBlock) -> str:
    """``content``'s text (a ``TextContent``: anything else fails the test)."""
    assert isinstance(content, TextContent), content
    return content.text
