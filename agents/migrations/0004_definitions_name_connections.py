"""Definitions name connections instead of holding provider and MCP settings (SPEC section 2).

Every inline model provider and MCP server of a stored version becomes a connection granted to the
tenant that had it (equal settings share one), and the version's content names it, so no stored agent
breaks. The bundled demo MCP server becomes the built-in `meetings`, the scripted model `scripted`.
"""

from django.db import migrations

BUILTIN = {"scripted", "meetings"}


def _is_demo_server(server):
    return server.get("args") == ["-m", "agents.mcp_demo"] and not server.get("url")


def forwards(apps, schema_editor):
    AgentVersion = apps.get_model("agents", "AgentVersion")
    Connection = apps.get_model("console", "Connection")
    taken = set(Connection.objects.values_list("name", flat=True)) | BUILTIN
    made = {}  # (tenant id, settings) -> connection name

    def connection_for(tenant, base, settings):
        key = (tenant.pk, tuple(sorted((k, repr(v)) for k, v in settings.items())))
        if key in made:
            return made[key]
        name, n = f"{tenant.slug}-{base}"[:60], 2
        while name in taken:
            name, n = f"{tenant.slug}-{base}-{n}"[:63], n + 1
        taken.add(name)
        connection = Connection.objects.create(name=name, description="made from an agent definition", **settings)
        connection.tenants.add(tenant)
        made[key] = name
        return name

    for version in AgentVersion.objects.select_related("agent__tenant").order_by("pk"):
        content, tenant = dict(version.content), version.agent.tenant
        model = dict(content.get("model") or {})
        if "connection" not in model:
            provider = model.pop("provider", "scripted")
            base_url, key_env = model.pop("baseUrl", None) or "", model.pop("apiKeyEnv", None) or ""
            if provider == "scripted":
                model = {"connection": "scripted", "name": None}
            else:
                settings = {"kind": provider, "base_url": base_url, "api_key_env": key_env}
                model = {"connection": connection_for(tenant, provider, settings), "name": model.get("name")}
        servers = []
        for server in content.get("mcpServers") or []:
            if "connection" in server:
                servers.append(server)
                continue
            if _is_demo_server(server):
                name = "meetings"
            else:
                settings = {
                    "kind": "mcp",
                    "command": server.get("command") or "",
                    "args": list(server.get("args") or []),
                    "env": list(server.get("env") or []),
                    "url": server.get("url") or "",
                }
                name = connection_for(tenant, server["name"], settings)
            servers.append(
                {"connection": name, "approval": server.get("approval", "never"), "toolPrefix": server.get("toolPrefix")}
            )
        content["model"], content["mcpServers"] = model, servers
        if content != version.content:
            # Versions are immutable to users; this rewrites the stored form, not what a version means.
            AgentVersion.objects.filter(pk=version.pk).update(content=content)


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0003_run_queue"),
        ("console", "0002_connection"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
