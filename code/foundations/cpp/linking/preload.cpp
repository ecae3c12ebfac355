// 与 libvec 同名同签名的函数：用 LD_PRELOAD 预先加载后，它排在全局查找顺序的最前面
const char* vec_version() { return "preloaded"; }
