#!/usr/bin/env python
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    if sys.argv[1:2] == ["serve"]:  # daphne's loop is uvloop's (docs/architecture.md, "A request's way in")
        import asyncio

        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
