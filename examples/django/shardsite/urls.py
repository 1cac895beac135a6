from django.urls import path

from photos.views import photo_json

urlpatterns = [path("photos/<int:photo_id>", photo_json)]
