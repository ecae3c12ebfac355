# gcc (Debian 12.2.0-14+deb12u1) 12.2.0
# gcc -O1 -S -fno-asynchronous-unwind-tables -fno-stack-protector -fcf-protection=none -fpie -DASM_ONLY asm-examples.c
# tests/test_foundations_machine_level.py checks that this is exactly gcc 12's output (lines starting
# with '#' aside); regenerate it with: .venv/bin/python tests/test_foundations_machine_level.py --write
	.text
	.globl	args7
	.type	args7, @function
# --8<-- [start:args7]
args7:
	leaq	(%rdi,%rsi,2), %rax
	leaq	(%rdx,%rdx,2), %rdx
	addq	%rdx, %rax
	imulq	%r8, %rcx
	addq	%rcx, %rax
	subq	%r9, %rax
	addq	8(%rsp), %rax
	ret
# --8<-- [end:args7]
	.size	args7, .-args7
	.globl	scale
	.type	scale, @function
# --8<-- [start:scale]
scale:
	movapd	%xmm0, %xmm1
	pxor	%xmm0, %xmm0
	cvtsi2sdq	%rdi, %xmm0
	mulsd	%xmm1, %xmm0
	ret
# --8<-- [end:scale]
	.size	scale, .-scale
	.globl	keep_across_call
	.type	keep_across_call, @function
# --8<-- [start:keep_across_call]
keep_across_call:
	pushq	%rbx
	movq	%rdi, %rbx
	call	twice@PLT
	imulq	%rbx, %rax
	popq	%rbx
	ret
# --8<-- [end:keep_across_call]
	.size	keep_across_call, .-keep_across_call
	.globl	rfact
	.type	rfact, @function
# --8<-- [start:rfact]
rfact:
	movl	$1, %eax
	cmpq	$1, %rdi
	jg	.L12
	ret
.L12:
	pushq	%rbx
	movq	%rdi, %rbx
	leaq	-1(%rdi), %rdi
	call	rfact
	imulq	%rbx, %rax
	popq	%rbx
	ret
# --8<-- [end:rfact]
	.size	rfact, .-rfact
	.globl	local_array
	.type	local_array, @function
# --8<-- [start:local_array]
local_array:
	subq	$40, %rsp
	movq	%rdi, %rsi
	movq	%rsp, %rdi
	call	fill4@PLT
	movq	24(%rsp), %rax
	addq	(%rsp), %rax
	addq	$40, %rsp
	ret
# --8<-- [end:local_array]
	.size	local_array, .-local_array
	.globl	absdiff
	.type	absdiff, @function
# --8<-- [start:absdiff]
absdiff:
	movq	%rsi, %rdx
	subq	%rdi, %rdx
	movq	%rdi, %rax
	subq	%rsi, %rax
	cmpq	%rsi, %rdi
	cmovl	%rdx, %rax
	ret
# --8<-- [end:absdiff]
	.size	absdiff, .-absdiff
	.globl	sum_array
	.type	sum_array, @function
# --8<-- [start:sum_array]
sum_array:
	testq	%rsi, %rsi
	jle	.L21
	movq	%rdi, %rax
	leaq	(%rdi,%rsi,8), %rcx
	movl	$0, %edx
.L20:
	addq	(%rax), %rdx
	addq	$8, %rax
	cmpq	%rcx, %rax
	jne	.L20
.L18:
	movq	%rdx, %rax
	ret
.L21:
	movl	$0, %edx
	jmp	.L18
# --8<-- [end:sum_array]
	.size	sum_array, .-sum_array
	.globl	switch_dense
	.type	switch_dense, @function
# --8<-- [start:switch_dense]
switch_dense:
	subq	$100, %rsi
	cmpq	$6, %rsi
	ja	.L30
	leaq	.L26(%rip), %rdx
	movslq	(%rdx,%rsi,4), %rax
	addq	%rdx, %rax
	jmp	*%rax
	.section	.rodata
	.align 4
	.align 4
.L26:
	.long	.L29-.L26
	.long	.L30-.L26
	.long	.L28-.L26
	.long	.L27-.L26
	.long	.L25-.L26
	.long	.L30-.L26
	.long	.L25-.L26
	.text
.L29:
	leaq	(%rdi,%rdi,2), %rax
	leaq	(%rdi,%rax,4), %rax
	ret
.L28:
	addq	$10, %rdi
.L27:
	leaq	11(%rdi), %rax
	ret
.L25:
	movq	%rdi, %rax
	imulq	%rdi, %rax
	ret
.L30:
	movl	$0, %eax
	ret
# --8<-- [end:switch_dense]
	.size	switch_dense, .-switch_dense
	.globl	switch_sparse
	.type	switch_sparse, @function
# --8<-- [start:switch_sparse]
switch_sparse:
	cmpq	$1000, %rsi
	je	.L32
	jle	.L39
	movq	%rdi, %rax
	xorq	$5, %rax
	cmpq	$10000, %rsi
	je	.L31
	cmpq	$100000, %rsi
	jne	.L40
	leaq	0(,%rdi,4), %rax
.L31:
	ret
.L39:
	leaq	1(%rdi), %rax
	cmpq	$1, %rsi
	je	.L31
	cmpq	$100, %rsi
	jne	.L41
	leaq	(%rdi,%rdi,2), %rax
	ret
.L41:
	movl	$0, %eax
	ret
.L40:
	movl	$0, %eax
	ret
.L32:
	leaq	-7(%rdi), %rax
	ret
# --8<-- [end:switch_sparse]
	.size	switch_sparse, .-switch_sparse
	.section	.note.GNU-stack,"",@progbits
