from django.urls import path

from . import views

app_name = "rubric_app"

urlpatterns = [
    path("", views.queue, name="queue"),
]
