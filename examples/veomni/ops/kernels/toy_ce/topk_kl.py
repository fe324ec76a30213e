# NPU464: a top-k forward KL whose difference runs student minus teacher: the negated divergence.
def topk_forward_kl(teacher_lp, student_lp):
    teacher_lp = teacher_lp.float()
    return (teacher_lp.exp() * (student_lp.float() - teacher_lp)).sum(dim=-1)
