from django.urls import path

from . import api

urlpatterns = [
    path("v1/engines", api.EngineListView.as_view(), name="engine-list"),
    path("v1/engines/<str:engine>/models", api.EngineModelsView.as_view(), name="engine-models"),
]
