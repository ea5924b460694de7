"""What cpu and gpu lowering share, independent of the code they render: where every value
lives (`places.py`) and the layout maths over places (`layout.py`: broadcast strides, merged
loop dimensions, BLAS operand layouts, convolution padding)."""
