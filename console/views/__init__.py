"""The console's own pages, one module per page: the dashboard (`dashboard`), the login page (`login`), the
Tenant and Notifications pages and the tenant switch (`tenant`), the API tokens page (`tokens`) and `/healthz`
(`health`). console/urls.py names each view."""
