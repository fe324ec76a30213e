_ops_config = None


def set_ops_config(config):
    _ops_config = config


def get_ops_config():
    return _ops_config
