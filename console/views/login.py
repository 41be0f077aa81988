"""The login page: Django's, with a username and address the throttle holds (console/login.py) answered 429
and told when to try again."""

import math

from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpResponse
from django.utils import timezone

from console.login import client_address, held_until


class LoginView(auth_views.LoginView):
    """The login page; a locked username and address get 429 and when to try again."""

    redirect_authenticated_user = True

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        username = form.cleaned_data.get("username")
        until = held_until(username, client_address(self.request)) if username else None
        if until is None:
            return super().form_invalid(form)
        seconds = math.ceil((until - timezone.now()).total_seconds())
        minutes = math.ceil(seconds / 60)
        form.errors.clear()
        form.add_error(
            None,
            f"Too many failed logins for this username from your address. Try again in {minutes} minute"
            f"{'' if minutes == 1 else 's'}.",
        )
        response = self.render_to_response(self.get_context_data(form=form), status=429)
        response["Retry-After"] = str(seconds)
        return response
