from django.urls import path

from identity.sign_in_pages import Callback, SignIn

urlpatterns = [
    path("oidc/callback/", Callback.as_view(), name="oidc_callback"),
    path("oidc/<slug:connection>/login/", SignIn.as_view(), name="oidc_login"),
]
