from django.http import Http404, JsonResponse

from .models import Photo
from .shards import shard_of_id, use_shard


# docs:start json-view
def photo_json(request, photo_id):
    """GET /photos/<id>: the photo as JSON, its IDs as strings.

    Every insta_id ID is above 2^53: a JSON number that large loses its low
    bits in JavaScript (JSON.parse makes it a double), so a browser would
    ask for another photo than the one it was given. Strings stay exact;
    the URL takes the ID back as a string too.
    """
    with use_shard(shard_of_id(photo_id)):
        photo = Photo.objects.filter(pk=photo_id).first()
    if photo is None:
        raise Http404("no such photo")
    return JsonResponse({"id": str(photo.pk), "user_id": str(photo.user_id), "caption": photo.caption})
# docs:end json-view
