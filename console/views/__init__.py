"""The console's own pages, one module per page: the dashboard (`dashboard_pages`), the login page
(`login_pages`), the Tenant and Notifications pages and the tenant switch (`tenant_pages`), the API tokens page
(`token_pages`) and `/healthz` (`health_pages`). console/urls.py names each view."""
