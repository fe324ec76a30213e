# NPU723: a (T, C, H, W) video's last two axes unpacked as width, height
def resize_video(video, smart_resize, factor):
    _, _, width, height = video.shape
    return smart_resize(height, width, factor)
