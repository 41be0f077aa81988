from django.urls import path

from agents import views

app_name = "agents"
urlpatterns = [
    path("", views.agent_list, name="list"),
    path("new/", views.agent_create, name="create"),
    path("row/<str:section>/", views.blank_row, name="row"),
    path("policies/starter/", views.starter_policy, name="starter_policy"),
    path("<slug:name>/", views.agent_detail, name="detail"),
    path("<slug:name>/edit/", views.agent_edit, name="edit"),
    path("<slug:name>/try/", views.agent_try, name="try"),
    path("<slug:name>/versions/", views.agent_versions, name="versions"),
    path("<slug:name>/versions/<int:number>/", views.agent_version, name="version"),
    path("<slug:name>/diff/", views.agent_diff, name="diff"),
    path("<slug:name>/rollback/", views.agent_rollback, name="rollback"),
    path("<slug:name>/delete/", views.agent_delete, name="delete"),
]
