from django.urls import path

from visits import views

urlpatterns = [
    path("visit/<str:name>", views.visit),
    path("visits/<str:name>", views.visits),
    path("top", views.top),
]
